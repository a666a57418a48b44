#include "tessera/optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::optim {
namespace {

struct Step {
  bool overflow;
  double scale;        // expected scale after update()
  int32_t hysteresis;  // expected cur_hysteresis after update()
};

void run(DynamicLossScaler& s, const std::vector<Step>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i) + " of the sequence, iter " +
                 std::to_string(s.state().cur_iter));
    s.update(steps[i].overflow);
    EXPECT_EQ(s.scale(), steps[i].scale);
    EXPECT_EQ(s.state().cur_hysteresis, steps[i].hysteresis);
  }
}

TEST(LossScaler, HandWorkedSequence) {
  // initial 1024, window 3, hysteresis 2, min 256. Worked by hand from DeepSpeed's rule
  // (growth when (iter - last_overflow_iter) % window == 0 on a clean step):
  DynamicLossScaler s = DynamicLossScaler::dynamic(1024, 3, 2, 256);
  run(s, {
             {true, 1024, 1},   // iter 0: hysteresis 2 -> 1 absorbs the overflow; last = 0
             {true, 512, 1},    // iter 1: hysteresis exhausted -> halve; last = 1
             {false, 512, 1},   // iter 2: (2-1) % 3 = 1; hysteresis is not refilled
             {false, 512, 1},   // iter 3: (3-1) % 3 = 2
             {false, 1024, 2},  // iter 4: (4-1) % 3 = 0 -> double, refill hysteresis
             {true, 1024, 1},   // iter 5: absorbed by hysteresis; last = 5
             {false, 1024, 1},  // iter 6: 1 % 3
             {true, 512, 1},    // iter 7: hysteresis still 1 -> halve; last = 7
             {true, 256, 1},    // iter 8: halve to the minimum; last = 8
         });
  // iter 9: overflow at the minimum with hysteresis exhausted -> the DeepSpeed error.
  try {
    s.update(true);
    FAIL() << "expected tessera::Error at the minimum scale";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Current loss scale already at minimum"),
              std::string::npos)
        << e.what();
  }
  // The failed update changed nothing.
  EXPECT_EQ(s.scale(), 256);
  EXPECT_EQ(s.state().cur_iter, 9);
  EXPECT_EQ(s.state().last_overflow_iter, 8);
  run(s, {
             {false, 256, 1},   // iter 9: (9-8) % 3 = 1
             {false, 256, 1},   // iter 10
             {false, 512, 2},   // iter 11: (11-8) % 3 = 0 -> double
             {false, 512, 2},   // iter 12
             {false, 512, 2},   // iter 13
             {false, 1024, 2},  // iter 14: (14-8) % 3 = 0 -> double again
         });
  EXPECT_EQ(s.state().cur_iter, 15);
}

TEST(LossScaler, FloorsAtMinWithoutError) {
  // min 300 is not a power of two: halving 512 gives max(256, 300) = 300, and only the next
  // overflow at exactly 300 is the error.
  DynamicLossScaler s = DynamicLossScaler::dynamic(512, 1000, 1, 300);
  s.update(true);
  EXPECT_EQ(s.scale(), 300);
  EXPECT_THROW(s.update(true), Error);
  // With the error disabled DeepSpeed keeps going at the floor.
  DynamicLossScaler q = DynamicLossScaler::dynamic(512, 1000, 1, 300, false, false);
  q.update(true);
  q.update(true);
  q.update(true);
  EXPECT_EQ(q.scale(), 300);
}

TEST(LossScaler, DefaultsGrowAfterAFullWindowOfCleanSteps) {
  // DeepSpeed defaults (2^16, window 1000, hysteresis 2): with last_overflow_iter = -1 the first
  // doubling happens on the 1000th clean step (iter 999: (999 + 1) % 1000 == 0).
  DynamicLossScaler s = DynamicLossScaler::dynamic();
  for (int i = 0; i < 999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072);
  for (int i = 0; i < 1000; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 262144);
}

TEST(LossScaler, HysteresisOneHalvesOnEveryOverflow) {
  DynamicLossScaler s = DynamicLossScaler::dynamic(64, 2, 1, 1);
  run(s, {{true, 32, 1}, {true, 16, 1}, {false, 16, 1}, {false, 32, 1}, {true, 16, 1}});
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  // Isolated overflows never halve; two in a row do.
  DynamicLossScaler s = DynamicLossScaler::dynamic(64, 100, 2, 1, /*consecutive=*/true);
  run(s, {
             {true, 64, 1},   // absorbed
             {false, 64, 2},  // refilled at once
             {true, 64, 1},   // absorbed again
             {false, 64, 2},
             {true, 64, 1},
             {true, 32, 1},  // back-to-back: halve
         });
}

TEST(LossScaler, StaticScaleNeverChanges) {
  DynamicLossScaler s = DynamicLossScaler::fixed(128);
  EXPECT_FALSE(s.is_dynamic());
  for (bool overflow : {true, true, true, false, true, false}) {
    s.update(overflow);
    EXPECT_EQ(s.scale(), 128);
  }
  EXPECT_EQ(s.state().cur_iter, 6);
  EXPECT_EQ(s.state().last_overflow_iter, 4);
  EXPECT_EQ(DynamicLossScaler::fixed(1.0).scale(), 1.0);  // bf16/fp32: no scaling
}

TEST(LossScaler, StateRoundTripContinuesIdentically) {
  DynamicLossScaler a = DynamicLossScaler::dynamic(4096, 5, 3, 2);
  for (bool o : {true, false, true, true, false, false}) a.update(o);
  DynamicLossScaler b(a.state());  // what a checkpoint restores
  for (bool o : {false, false, false, true, true, true, false, false, false, false, false}) {
    a.update(o);
    b.update(o);
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.state().cur_hysteresis, b.state().cur_hysteresis);
    EXPECT_EQ(a.state().last_overflow_iter, b.state().last_overflow_iter);
  }
}

TEST(LossScaler, RejectsBadConfiguration) {
  EXPECT_THROW(DynamicLossScaler::fixed(0.0), Error);
  EXPECT_THROW(DynamicLossScaler::dynamic(0.0), Error);
  EXPECT_THROW(DynamicLossScaler::dynamic(65536, 0), Error);
  EXPECT_THROW(DynamicLossScaler::dynamic(65536, 1000, 0), Error);
  EXPECT_THROW(DynamicLossScaler::dynamic(65536, 1000, 2, -1.0), Error);
}

}  // namespace
}  // namespace tessera::optim
