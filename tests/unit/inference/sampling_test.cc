// Sampling against hand-worked values and an independent computation of the filtered
// distribution: the penalty, greedy choice, the sets top-k, top-p and min-p keep, the draw's
// frequencies over many positions, its dependence on seed and position only, log-probabilities.
#include "tessera/inference/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

namespace tessera::inference {
namespace {

// Logits whose softmax is `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// The tokens drawn over `n` positions.
std::map<int32_t, int> draws(const std::vector<float>& logits, const SamplingParams& p, int n) {
  std::map<int32_t, int> count;
  for (int pos = 0; pos < n; ++pos) {
    std::vector<float> l = logits;
    ++count[sample_token(l, p, {}, pos)];
  }
  return count;
}

std::set<int32_t> support(const std::map<int32_t, int>& count) {
  std::set<int32_t> s;
  for (const auto& [t, n] : count) s.insert(t);
  return s;
}

TEST(Sampling, RepetitionPenaltyAndGreedyAreTheHandWorkedOnes) {
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 1.9f};
  EXPECT_EQ(sample_token(l, greedy, {}, 0), 0);
  // Penalty 2 on tokens 0 and 1 (seen twice: once): 2 -> 1, -1 -> -2; 1.9 wins.
  greedy.repetition_penalty = 2;
  l = {2.0f, -1.0f, 0.5f, 1.9f};
  const std::vector<int32_t> seen = {0, 1, 0};
  EXPECT_EQ(sample_token(l, greedy, seen, 0), 3);
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_FLOAT_EQ(l[1], -2.0f);
  // Ties: the lowest id.
  l = {1.0f, 3.0f, 3.0f};
  greedy.repetition_penalty = 1;
  EXPECT_EQ(sample_token(l, greedy, {}, 0), 1);
}

TEST(Sampling, TopKTopPAndMinPKeepTheHandWorkedSets) {
  const std::vector<float> l = logits_of({0.05, 0.5, 0.3, 0.15});  // order: 1, 2, 3, 0
  SamplingParams p;
  p.seed = 3;
  p.top_k = 2;
  EXPECT_EQ(support(draws(l, p, 2000)), (std::set<int32_t>{1, 2}));
  p = {};
  p.top_p = 0.79;  // 0.5 + 0.3 reaches it (values away from the boundaries: fp32 logits)
  EXPECT_EQ(support(draws(l, p, 2000)), (std::set<int32_t>{1, 2}));
  p.top_p = 0.81;  // needs the third
  EXPECT_EQ(support(draws(l, p, 2000)), (std::set<int32_t>{1, 2, 3}));
  p.top_p = 0.4;  // the first alone
  EXPECT_EQ(support(draws(l, p, 200)), (std::set<int32_t>{1}));
  p = {};
  p.min_p = 0.29;  // at least 0.145: tokens 1, 2 and 3
  EXPECT_EQ(support(draws(l, p, 2000)), (std::set<int32_t>{1, 2, 3}));
  p.min_p = 0.31;  // at least 0.155: 3 is out
  EXPECT_EQ(support(draws(l, p, 2000)), (std::set<int32_t>{1, 2}));
}

TEST(Sampling, DrawsFollowTheFilteredDistribution) {
  // Temperature 0.5 squares the probabilities before renormalising; top-k 3 keeps 1, 2, 3.
  const std::vector<double> probs = {0.05, 0.4, 0.3, 0.2, 0.05};
  const std::vector<float> l = logits_of(probs);
  SamplingParams p;
  p.temperature = 0.5;
  p.top_k = 3;
  p.seed = 42;
  const int n = 40000;
  const std::map<int32_t, int> count = draws(l, p, n);
  double z = 0;
  for (int t : {1, 2, 3}) z += probs[t] * probs[t];
  for (int t : {1, 2, 3}) {
    const double expected = probs[t] * probs[t] / z;
    const double sigma = std::sqrt(expected * (1 - expected) / n);
    EXPECT_NEAR(count.count(t) ? count.at(t) / double(n) : 0.0, expected, 5 * sigma) << t;
  }
  EXPECT_EQ(count.count(0) + count.count(4), 0u);
}

TEST(Sampling, TheDrawDependsOnSeedAndPositionOnly) {
  const std::vector<float> l = logits_of({0.25, 0.25, 0.25, 0.25});
  SamplingParams a;
  a.seed = 7;
  SamplingParams b = a;
  b.seed = 8;
  int differ = 0;
  for (int pos = 0; pos < 64; ++pos) {
    std::vector<float> x = l, y = l, z = l;
    const int32_t t = sample_token(x, a, {}, pos);
    EXPECT_EQ(t, sample_token(y, a, {}, pos));  // the same (seed, position): the same token
    differ += t != sample_token(z, b, {}, pos);
  }
  EXPECT_GT(differ, 16);  // another seed: other tokens (3/4 of the time by chance)
}

TEST(Sampling, LogprobsAreTheLogSoftmax) {
  const std::vector<float> l = {1.0f, 2.0f, 3.0f};
  const double z = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const TokenLogprob lp = token_logprob(l, 1, 2);
  EXPECT_NEAR(lp.logprob, 2.0 - z, 1e-12);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 2);
  EXPECT_NEAR(lp.top[0].second, 3.0 - z, 1e-12);
  EXPECT_EQ(lp.top[1].first, 1);
}

TEST(Sampling, OutOfRangeParametersAreNamed) {
  SamplingParams p;
  EXPECT_EQ(p.check(), "");
  p.top_p = 0;
  EXPECT_NE(p.check().find("top_p"), std::string::npos);
  p = {};
  p.min_p = 2;
  EXPECT_NE(p.check().find("min_p"), std::string::npos);
  p = {};
  p.top_k = -1;
  EXPECT_NE(p.check().find("top_k"), std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_NE(p.check().find("repetition_penalty"), std::string::npos);
  p = {};
  p.temperature = NAN;
  EXPECT_NE(p.check().find("temperature"), std::string::npos);
}

}  // namespace
}  // namespace tessera::inference
