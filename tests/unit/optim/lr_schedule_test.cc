#include "tessera/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "tessera/core/error.h"

namespace tessera::optim {
namespace {

// Peak 6e-4, floor 6e-5, 100 warmup steps, decay over 1000 steps (warmup included): the
// GPT-2-small recipe scaled down. Closed forms below are written out by hand.
constexpr double kMax = 6e-4, kMin = 6e-5;
// The schedule is a few double operations: expect agreement to rounding.
constexpr double kTol = 1e-18;

LRScheduleOptions base(LRDecayStyle style) {
  LRScheduleOptions o;
  o.lr = kMax;
  o.min_lr = kMin;
  o.warmup_iters = 100;
  o.decay_iters = 1000;
  o.decay_style = style;
  return o;
}

void expect_warmup(const LRScheduler& s) {
  EXPECT_EQ(s.lr_at(0), 0.0);                 // Megatron's first update uses lr 0
  EXPECT_NEAR(s.lr_at(1), kMax / 100, kTol);  // lr * 1 / 100
  EXPECT_NEAR(s.lr_at(50), 3e-4, kTol);       // lr * 50 / 100
  EXPECT_NEAR(s.lr_at(100), kMax, kTol);      // step <= warmup still warms up: lr * 100/100
}

TEST(LRSchedule, DecoupledLrFollowsTheSameScheduleBetweenItsOwnBounds) {
  // Megatron's --decoupled-lr 1e-3 --decoupled-min-lr 1e-4: the same warmup and cosine shape,
  // peak and floor of their own. Step 550 is halfway through the decay: coeff (cos(pi/2)+1)/2.
  LRScheduleOptions o = base(LRDecayStyle::kCosine);
  o.decoupled_lr = 1e-3;
  o.decoupled_min_lr = 1e-4;
  const LRScheduler s(o);
  EXPECT_NEAR(s.decoupled_lr_at(50), 1e-3 * 50 / 100, kTol);
  EXPECT_NEAR(s.decoupled_lr_at(550), 1e-4 + 0.5 * (1e-3 - 1e-4), kTol);
  EXPECT_NEAR(s.lr_at(550), kMin + 0.5 * (kMax - kMin), kTol);
  EXPECT_EQ(s.decoupled_lr_at(1001), 1e-4);
  // Without --decoupled-min-lr the floor is --min-lr; without --decoupled-lr there is none.
  o.decoupled_min_lr = -1;
  EXPECT_EQ(LRScheduler(o).decoupled_lr_at(1001), kMin);
  EXPECT_LT(LRScheduler(base(LRDecayStyle::kCosine)).decoupled_lr_at(10), 0.0);
  o.decoupled_lr = kMin / 2;  // below its floor
  EXPECT_THROW(LRScheduler{o}, Error);
}

TEST(LRSchedule, Linear) {
  const LRScheduler s(base(LRDecayStyle::kLinear));
  expect_warmup(s);
  // ratio = (550 - 100) / 900 = 0.5 -> min + 0.5 * (max - min) = 3.3e-4
  EXPECT_NEAR(s.lr_at(550), 3.3e-4, kTol);
  // ratio = (325 - 100) / 900 = 0.25 -> min + 0.75 * (max - min) = 4.65e-4
  EXPECT_NEAR(s.lr_at(325), 4.65e-4, kTol);
  EXPECT_NEAR(s.lr_at(1000), kMin, kTol);  // end of decay: ratio 1
  EXPECT_EQ(s.lr_at(1001), kMin);          // after the end: min_lr
  EXPECT_EQ(s.lr_at(100000), kMin);
}

TEST(LRSchedule, Cosine) {
  const LRScheduler s(base(LRDecayStyle::kCosine));
  expect_warmup(s);
  // ratio 0.5: (cos(pi/2) + 1) / 2 = 0.5 -> 3.3e-4
  EXPECT_NEAR(s.lr_at(550), 3.3e-4, kTol);
  // ratio 0.25: (cos(pi/4) + 1) / 2 = 0.8535533905932737 -> 5.209188309203678e-4
  EXPECT_NEAR(s.lr_at(325), 5.209188309203678e-4, kTol);
  EXPECT_NEAR(s.lr_at(1000), kMin, kTol);
  EXPECT_EQ(s.lr_at(1001), kMin);
}

TEST(LRSchedule, ConstantNeverDecays) {
  const LRScheduler s(base(LRDecayStyle::kConstant));
  expect_warmup(s);
  EXPECT_EQ(s.lr_at(101), kMax);
  EXPECT_EQ(s.lr_at(1000), kMax);
  EXPECT_EQ(s.lr_at(5000), kMax);  // Megatron returns max_lr before the decay_iters check
}

TEST(LRSchedule, InverseSquareRoot) {
  LRScheduleOptions o = base(LRDecayStyle::kInverseSquareRoot);
  const LRScheduler s(o);
  expect_warmup(s);
  EXPECT_NEAR(s.lr_at(400), 3e-4, kTol);  // 6e-4 * sqrt(100) / sqrt(400) = 6e-4 * 10 / 20
  EXPECT_NEAR(s.lr_at(900), 2e-4, kTol);  // 6e-4 * 10 / 30
  EXPECT_NEAR(s.lr_at(1000), 6e-4 * 10 / std::sqrt(1000.0), kTol);  // 1.897e-4
  EXPECT_EQ(s.lr_at(1001), kMin);                                   // after decay_iters
  // Clamped at min_lr: with min 2.5e-4, step 900 would give 2e-4.
  o.min_lr = 2.5e-4;
  EXPECT_EQ(LRScheduler(o).lr_at(900), 2.5e-4);
  EXPECT_NEAR(LRScheduler(o).lr_at(400), 3e-4, kTol);
  // No warmup: max(warmup, 1) and max(step, 1) make step 0 and 1 both the peak.
  o.warmup_iters = 0;
  o.min_lr = 0;
  EXPECT_EQ(LRScheduler(o).lr_at(0), kMax);
  EXPECT_EQ(LRScheduler(o).lr_at(1), kMax);
  EXPECT_NEAR(LRScheduler(o).lr_at(4), 3e-4, kTol);  // 6e-4 * 1 / 2
}

TEST(LRSchedule, WSDAllAnnealingStyles) {
  // Stable at the peak until 1000 - 200 = 800, then anneal over 200 steps.
  LRScheduleOptions o = base(LRDecayStyle::kWSD);
  o.wsd_decay_iters = 200;
  // w = (900 - 800) / 200 = 0.5 at step 900.
  struct Case {
    WSDDecayStyle style;
    double mid;  // lr at step 900
  } cases[] = {
      {WSDDecayStyle::kExponential, 2.836753236814713e-4},  // coeff 2 * 0.5^0.5 - 1 = 0.41421
      {WSDDecayStyle::kLinear, 3.3e-4},                     // coeff 1 - 0.5
      {WSDDecayStyle::kCosine, 3.3e-4},                     // coeff (cos(pi/2) + 1) / 2
      {WSDDecayStyle::kMinusSqrt, 2.1816233815926428e-4},   // coeff 1 - sqrt(0.5) = 0.29289
  };
  for (const Case& c : cases) {
    o.wsd_decay_style = c.style;
    const LRScheduler s(o);
    SCOPED_TRACE(wsd_decay_style_name(c.style));
    expect_warmup(s);
    EXPECT_EQ(s.lr_at(101), kMax);  // stable phase
    EXPECT_EQ(s.lr_at(500), kMax);
    EXPECT_EQ(s.lr_at(800), kMax);  // last stable step (step <= anneal start)
    EXPECT_NEAR(s.lr_at(900), c.mid, kTol);
    EXPECT_NEAR(s.lr_at(1000), kMin, kTol);  // every style's coeff is 0 at w = 1
    EXPECT_EQ(s.lr_at(1001), kMin);
  }
}

TEST(LRSchedule, WarmupInitAndFraction) {
  LRScheduleOptions o = base(LRDecayStyle::kLinear);
  o.init_lr = 1e-4;
  EXPECT_NEAR(LRScheduler(o).lr_at(50), 1e-4 + 5e-4 * 0.5, kTol);  // init + (max-init) * 50/100
  EXPECT_EQ(LRScheduler(o).lr_at(0), 1e-4);

  // --lr-warmup-fraction 0.0125 of 1000 decay iters = 12.5 warmup steps, kept fractional.
  o = base(LRDecayStyle::kLinear);
  o.warmup_iters = warmup_iters_from_fraction(0.0125, 1000);
  EXPECT_EQ(o.warmup_iters, 12.5);
  const LRScheduler s(o);
  EXPECT_NEAR(s.lr_at(12), kMax * 12 / 12.5, kTol);
  // Decaying from step 13: ratio (13 - 12.5) / 987.5.
  EXPECT_NEAR(s.lr_at(13), kMin + (1 - 0.5 / 987.5) * (kMax - kMin), kTol);
  EXPECT_THROW(warmup_iters_from_fraction(1.5, 1000), Error);
}

TEST(LRSchedule, ParsesMegatronNames) {
  for (const char* name : {"constant", "linear", "cosine", "inverse-square-root", "WSD"}) {
    EXPECT_STREQ(lr_decay_style_name(parse_lr_decay_style(name)), name);
  }
  for (const char* name : {"exponential", "linear", "cosine", "minus_sqrt"}) {
    EXPECT_STREQ(wsd_decay_style_name(parse_wsd_decay_style(name)), name);
  }
  try {
    parse_lr_decay_style("wsd");  // Megatron's choices are case-sensitive
    FAIL() << "expected tessera::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--lr-decay-style"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_wsd_decay_style("1-sqrt"), Error);
}

TEST(LRSchedule, RejectsWhatMegatronAsserts) {
  LRScheduleOptions o = base(LRDecayStyle::kCosine);
  o.warmup_iters = 1000;  // warmup must be < decay
  EXPECT_THROW(LRScheduler{o}, Error);
  o = base(LRDecayStyle::kCosine);
  o.min_lr = 1e-3;  // above the peak
  EXPECT_THROW(LRScheduler{o}, Error);
  o = base(LRDecayStyle::kCosine);
  o.decay_iters = 0;
  EXPECT_THROW(LRScheduler{o}, Error);
  o = base(LRDecayStyle::kCosine);
  o.init_lr = 1.0;
  EXPECT_THROW(LRScheduler{o}, Error);
  o = base(LRDecayStyle::kWSD);
  o.wsd_decay_iters = -1;
  EXPECT_THROW(LRScheduler{o}, Error);
}

}  // namespace
}  // namespace tessera::optim
