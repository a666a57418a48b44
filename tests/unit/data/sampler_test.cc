#include "tessera/data/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {


TEST(MockSampler, IsDeterministicAndIndexAddressed) {
  MockSampler a(257, 33, /*seed=*/1234, 50);
  MockSampler b(257, 33, 1234, 50);
  MockSampler c(257, 33, 1235, 50);
  std::vector<int32_t> x(34), y(34), z(34);
  // b draws in reverse order: a sample must not depend on which were drawn before.
  std::vector<std::vector<int32_t>> from_b(50, std::vector<int32_t>(34));
  for (int64_t i = 49; i >= 0; --i) b.sample(i, from_b[i].data());
  int differing = 0;
  for (int64_t i = 0; i < 50; ++i) {
    a.sample(i, x.data());
    EXPECT_EQ(x, from_b[i]) << i;
    c.sample(i, z.data());
    differing += x != z;
    for (int32_t t : x) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, 257);
    }
  }
  EXPECT_EQ(differing, 50);
  EXPECT_THROW(a.sample(50, x.data()), Error);
  EXPECT_THROW(MockSampler(1, 8, 0, 1), Error);
  EXPECT_THROW(MockSampler(16, 8, 0, 1, 1.5), Error);
}

TEST(MockSampler, EntropyRateFormulaHasKnownValue) {
  // V = 257, p = 0.9: -(0.9 + 0.1/257) ln(0.9 + 0.1/257) - 256 (0.1/257) ln(0.1/257), by hand.
  const double v = 257, p = 0.9;
  const double hand = -(p + (1 - p) / v) * std::log(p + (1 - p) / v) -
                      (v - 1) * ((1 - p) / v) * std::log((1 - p) / v);
  MockSampler s(257, 16, 0, 1);
  EXPECT_NEAR(s.entropy_rate(), hand, 1e-12);
  EXPECT_NEAR(s.entropy_rate(), 0.877, 0.001);
  EXPECT_NEAR(MockSampler(64, 16, 0, 1, 0.0).entropy_rate(), std::log(64.0), 1e-12);
  EXPECT_NEAR(MockSampler(64, 16, 0, 1, 1.0).entropy_rate(), 0.0, 1e-12);
}

// Plug-in estimate of H(next | current) in nats from the samples' bigram counts.
double empirical_conditional_entropy(const MockSampler& s, int64_t* follow_count,
                                     int64_t* transitions) {
  const int64_t v = s.vocab_size(), len = s.seq_length() + 1;
  std::vector<int64_t> counts(v * v, 0);
  std::vector<int32_t> out(len);
  *follow_count = 0;
  for (int64_t i = 0; i < s.num_samples(); ++i) {
    s.sample(i, out.data());
    for (int64_t t = 1; t < len; ++t) {
      ++counts[out[t - 1] * v + out[t]];
      *follow_count += out[t] == s.successor(out[t - 1]);
    }
  }
  *transitions = s.num_samples() * (len - 1);
  double h = 0;
  for (int64_t a = 0; a < v; ++a) {
    const int64_t row = std::accumulate(&counts[a * v], &counts[a * v] + v, int64_t{0});
    for (int64_t b = 0; b < v && row > 0; ++b) {
      if (counts[a * v + b] == 0) continue;
      const double pab = static_cast<double>(counts[a * v + b]) / *transitions;
      h -= pab * std::log(static_cast<double>(counts[a * v + b]) / row);
    }
  }
  return h;
}

TEST(MockSampler, EmpiricalEntropyMatchesRateAndIsFarBelowUniform) {
  // V = 64: 400 x 256 = 102400 transitions, ~1600 per state. The plug-in estimate is biased
  // low by about (support - 1) / (2 * per-state count) ~ 63 / 3200 = 0.02 nats, hence 0.05.
  MockSampler small(64, 256, 7, 400);
  int64_t follow = 0, transitions = 0;
  const double h = empirical_conditional_entropy(small, &follow, &transitions);
  EXPECT_NEAR(h, small.entropy_rate(), 0.05);
  // Following probability p + (1-p)/V = 0.9016; binomial sd over 102400 draws ~ 0.001.
  EXPECT_NEAR(static_cast<double>(follow) / transitions, 0.9 + 0.1 / 64, 0.005);

  // The byte vocabulary: a model that learns the chain reaches ~0.88 nats, far below ln 257.
  MockSampler bytes(257, 128, 11, 200);
  const double hb = empirical_conditional_entropy(bytes, &follow, &transitions);
  EXPECT_LT(hb, 0.25 * std::log(257.0));
  EXPECT_LT(bytes.entropy_rate(), 0.2 * std::log(257.0));
}

}  // namespace
}  // namespace tessera::data
