// The MoE router against hand-worked values and finite differences.
#include "tessera/moe/router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::moe {
namespace {

std::vector<float> random_logits(int64_t T, int E, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> l(T * E);
  for (float& x : l) x = n(gen);
  return l;
}

TEST(MoeRouter, SoftmaxTopKByHand) {
  // One token, E 4, k 2: the two largest logits 2 and 1 (experts 2 and 0); weights
  // softmax([2, 1]) = [e/(e+1), 1/(e+1)].
  const std::vector<float> l = {1.0f, -1.0f, 2.0f, 0.5f};
  RouterConfig cfg{4, 2};
  const Routing r = route(l.data(), 1, cfg);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 0}));
  const double e = std::exp(1.0);
  EXPECT_NEAR(r.weights[0], e / (e + 1), 1e-7);
  EXPECT_NEAR(r.weights[1], 1 / (e + 1), 1e-7);
  EXPECT_EQ(r.expert_count, (std::vector<int64_t>{1, 0, 1, 0}));
  // Pre-softmax: softmax over all four, not renormalised.
  cfg.pre_softmax = true;
  const Routing p = route(l.data(), 1, cfg);
  const double z = std::exp(1.0) + std::exp(-1.0) + std::exp(2.0) + std::exp(0.5);
  EXPECT_NEAR(p.weights[0], std::exp(2.0) / z, 1e-7);
  EXPECT_NEAR(p.weights[1], std::exp(1.0) / z, 1e-7);
  // Ties go to the lower index.
  const std::vector<float> tie = {0.0f, 0.0f, 0.0f};
  EXPECT_EQ(route(tie.data(), 1, RouterConfig{3, 2}).experts, (std::vector<int32_t>{0, 1}));
}

TEST(MoeRouter, SigmoidBiasChoosesButDoesNotWeigh) {
  const std::vector<float> l = {2.0f, 1.0f, -1.0f};
  RouterConfig cfg{3, 2, ScoreFunction::kSigmoid};
  const std::vector<float> bias = {0.0f, 0.0f, 5.0f};  // expert 2 wins the choice
  const Routing r = route(l.data(), 1, cfg, bias.data());
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 0}));
  const double s2 = 1 / (1 + std::exp(1.0)), s0 = 1 / (1 + std::exp(-2.0));
  EXPECT_NEAR(r.weights[0], s2 / (s2 + s0), 1e-7);  // the unbiased sigmoids
  EXPECT_NEAR(r.weights[1], s0 / (s2 + s0), 1e-7);
}

TEST(MoeRouter, AuxLossIsCoeffAtUniformRoutingAndGrowsAsItCollapses) {
  const int64_t T = 16;
  const int E = 8, k = 2;
  const RouterConfig cfg{E, k};
  std::vector<float> l(T * E, 0.0f);
  EXPECT_NEAR(aux_loss(l.data(), route(l.data(), T, cfg), cfg, 0.01), 0.01, 1e-15);
  double previous = 0.01;
  for (float bias : {0.5f, 1.0f, 2.0f, 4.0f, 8.0f}) {  // experts 0 and 1 ever more favoured
    for (int64_t t = 0; t < T; ++t) l[t * E] = l[t * E + 1] = bias;
    const double loss = aux_loss(l.data(), route(l.data(), T, cfg), cfg, 0.01);
    EXPECT_GT(loss, previous);
    previous = loss;
  }
  // Fully collapsed on two of eight experts: coeff * E / k.
  EXPECT_NEAR(previous, 0.01 * E / k, 0.01 * E / k * 1e-2);
}

TEST(MoeRouter, ZLossByHand) {
  // Tokens [0, ln 3] and [1, 1]: logsumexp ln 4 and 1 + ln 2.
  const std::vector<float> l = {0.0f, static_cast<float>(std::log(3.0)), 1.0f, 1.0f};
  const double a = std::log(4.0), b = 1 + std::log(2.0);
  EXPECT_NEAR(z_loss(l.data(), 2, 2, 1e-3), 1e-3 * (a * a + b * b) / 2, 1e-9);
}

// d/dlogits of sum(weights * g) + aux + z, against central differences in the logits (the
// routing is kept: a small step changes no choice for these random logits).
void check_gradients(const RouterConfig& cfg) {
  const int64_t T = 6;
  const int E = cfg.num_experts, k = cfg.topk;
  std::vector<float> l = random_logits(T, E, 7);
  std::vector<float> g = random_logits(T, k, 11);
  const auto objective = [&](const std::vector<float>& logits, float* dlogits) {
    const Routing r = route(logits.data(), T, cfg);
    double f = 0;
    for (int64_t i = 0; i < T * k; ++i) f += double(r.weights[i]) * g[i];
    if (dlogits) route_backward(dlogits, logits.data(), r, g.data(), cfg);
    f += aux_loss(logits.data(), r, cfg, 0.1, dlogits);
    f += z_loss(logits.data(), T, E, 0.01, dlogits);
    return f;
  };
  std::vector<float> grad(T * E, 0.0f);
  objective(l, grad.data());
  const Routing base = route(l.data(), T, cfg);
  const float h = 1e-2f;
  for (int64_t i = 0; i < T * E; ++i) {
    std::vector<float> up = l, down = l;
    up[i] += h;
    down[i] -= h;
    ASSERT_EQ(route(up.data(), T, cfg).experts, base.experts) << "a step changed the routing";
    ASSERT_EQ(route(down.data(), T, cfg).experts, base.experts);
    const double fd = (objective(up, nullptr) - objective(down, nullptr)) / (2.0 * h);
    EXPECT_NEAR(grad[i], fd, 2e-4) << "logit " << i;
  }
}

TEST(MoeRouter, GradientsMatchFiniteDifferences) {
  check_gradients(RouterConfig{5, 2});
  RouterConfig pre{5, 2};
  pre.pre_softmax = true;
  pre.topk_scaling = 1.5f;
  check_gradients(pre);
  check_gradients(RouterConfig{5, 3, ScoreFunction::kSigmoid});
  check_gradients(RouterConfig{4, 1});
}

// Context parallelism: tokens split into parts, each part's aux loss and z-loss computed with
// the whole set's expert counts and token count, sum to the whole set's losses, and each part's
// gradients are the whole gradients' rows.
TEST(MoeRouter, PartsWithTheWholeCountsSumToTheWholeLosses) {
  const int E = 5;
  const int64_t T = 12;
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  std::vector<float> logits(T * E);
  for (float& x : logits) x = nd(gen);
  for (ScoreFunction score : {ScoreFunction::kSoftmax, ScoreFunction::kSigmoid}) {
    RouterConfig cfg{E, 2, score};
    const Routing whole = route(logits.data(), T, cfg);
    std::vector<float> dwhole(T * E, 0.0f), dparts(T * E, 0.0f);
    const double aux = aux_loss(logits.data(), whole, cfg, 0.1, dwhole.data());
    const double z = z_loss(logits.data(), T, E, 0.01, dwhole.data());
    double aux_sum = 0, z_sum = 0;
    for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 5}, {5, 12}}) {
      const Routing part = routing_slice(whole, begin, end, E);
      aux_sum += aux_loss(logits.data() + begin * E, part, cfg, 0.1, dparts.data() + begin * E,
                          whole.expert_count.data(), T);
      z_sum += z_loss(logits.data() + begin * E, end - begin, E, 0.01, dparts.data() + begin * E, T);
    }
    EXPECT_NEAR(aux_sum, aux, 1e-12 * std::fabs(aux) + 1e-15);
    EXPECT_NEAR(z_sum, z, 1e-12 * std::fabs(z) + 1e-15);
    for (int64_t i = 0; i < T * E; ++i) EXPECT_NEAR(dparts[i], dwhole[i], 1e-7) << i;
  }
}

TEST(MoeRouter, BadConfigurationsAreOneClearError) {
  EXPECT_THROW((RouterConfig{4, 5}.validate()), Error);
  EXPECT_THROW((RouterConfig{4, 0}.validate()), Error);
  RouterConfig sig{4, 2, ScoreFunction::kSigmoid};
  sig.pre_softmax = true;
  EXPECT_THROW(sig.validate(), Error);
}

}  // namespace
}  // namespace tessera::moe
