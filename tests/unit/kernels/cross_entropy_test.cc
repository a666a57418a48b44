#include "tessera/kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tessera/kernels/elementwise.h"
#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::random_normal;

// Naive double-precision reference: loss (N) and dlogits (N, V), padded columns 0.
struct Reference {
  std::vector<double> loss;
  std::vector<double> dlogits;
};
Reference reference(const std::vector<float>& logits, const std::vector<int32_t>& targets,
                    const std::vector<float>* mask, int64_t N, int64_t V, int64_t V_real,
                    double grad_scale) {
  Reference r{std::vector<double>(N, 0.0), std::vector<double>(N * V, 0.0)};
  for (int64_t n = 0; n < N; ++n) {
    const double w = mask ? (*mask)[n] : 1.0;
    if (w == 0.0) continue;
    const float* x = logits.data() + n * V;
    double max = -1e300;
    for (int64_t i = 0; i < V_real; ++i) max = std::max(max, double(x[i]));
    double sum = 0.0;
    for (int64_t i = 0; i < V_real; ++i) sum += std::exp(double(x[i]) - max);
    r.loss[n] = w * (std::log(sum) + max - double(x[targets[n]]));
    for (int64_t i = 0; i < V_real; ++i) {
      const double p = std::exp(double(x[i]) - max) / sum;
      r.dlogits[n * V + i] = w * grad_scale * (p - (i == targets[n] ? 1.0 : 0.0));
    }
  }
  return r;
}

std::vector<int32_t> make_targets(int64_t N, int64_t V_real, uint64_t seed) {
  std::vector<float> u = random_normal(N, seed);
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n) {
    t[n] = static_cast<int32_t>(std::fabs(u[n]) * 7919.0f) % static_cast<int32_t>(V_real);
  }
  return t;
}

// exp(x) of the first n values by the kernels' vectorised exp (kernels::exp_f32).
void fast_exp_n(float* out, const float* in, int n) { exp_f32(out, in, n); }

// Distance in units in the last place between two finite non-negative floats.
int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(int64_t(ia) - int64_t(ib));
}

TEST(CrossEntropyFastExp, WithinTwoUlpOfCorrectlyRoundedExp) {
  // Dense sweep over the whole useful range plus the ends: normal results, subnormal results,
  // overflow to inf and underflow to 0.
  std::vector<float> xs;
  for (double x = -104.5; x <= 89.5; x += 0.000731) xs.push_back(float(x));
  for (float x : {0.0f, -0.0f, 1e-8f, -1e-8f, 0.34657359f, -0.34657359f, 88.72f, 88.73f, -87.33f,
                  -87.34f, -103.9f, -103.99f})
    xs.push_back(x);
  std::vector<float> got(xs.size());
  for (size_t i = 0; i < xs.size(); i += 16) {
    const int n = static_cast<int>(std::min<size_t>(16, xs.size() - i));
    fast_exp_n(got.data() + i, xs.data() + i, n);
  }
  int64_t worst_normal = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = static_cast<float>(std::exp(double(xs[i])));  // correctly rounded
    ASSERT_TRUE(std::isfinite(want) == std::isfinite(got[i])) << "x=" << xs[i];
    if (!std::isfinite(want)) continue;
    if (want >= std::numeric_limits<float>::min()) {
      worst_normal = std::max(worst_normal, ulp_distance(got[i], want));
    } else {
      // Subnormal or zero: one rounding of the exact value, so at most one subnormal step off.
      EXPECT_LE(ulp_distance(got[i], want), 1) << "x=" << xs[i];
    }
  }
  EXPECT_LE(worst_normal, 2);
  std::printf("fast_exp_ps: %zu points, worst normal-range error %lld ulp\n", xs.size(),
              static_cast<long long>(worst_normal));
}

TEST(CrossEntropyFastExp, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float in[5] = {-inf, inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, -200.0f};
  float out[5];
  fast_exp_n(out, in, 5);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], inf);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], 1.0f);
  EXPECT_EQ(out[4], 0.0f);
}

TEST(CrossEntropy, LossAndGradMatchDoubleReferenceWithMaskAndPadding) {
  // V_real = 37 (not a multiple of 16) padded to V = 48; some rows masked, one row half-weighted.
  const int64_t N = 7, V = 48, V_real = 37;
  const float grad_scale = 0.25f;
  std::vector<float> logits = random_normal(N * V, 11, 3.0f);
  const std::vector<int32_t> targets = make_targets(N, V_real, 12);
  const std::vector<float> mask = {1, 0, 1, 0.5f, 1, 0, 1};
  const Reference ref = reference(logits, targets, &mask, N, V, V_real, grad_scale);

  std::vector<float> losses(N, -1.0f), dlogits(N * V, 123.0f);
  cross_entropy_forward_backward<float>(losses.data(), dlogits.data(), logits.data(),
                                        targets.data(), mask.data(), N, V, V_real, grad_scale);
  // fp32 sums over <= 37 terms and a ~2-ulp exp: errors of a few 1e-7 relative.
  EXPECT_LT(max_scaled_error(losses, ref.loss), 1e-6);
  EXPECT_LT(max_scaled_error(dlogits, ref.dlogits), 1e-6);
  for (int64_t n = 0; n < N; ++n) {
    if (mask[n] == 0.0f) {
      EXPECT_EQ(losses[n], 0.0f);
    }
    for (int64_t i = V_real; i < V; ++i) EXPECT_EQ(dlogits[n * V + i], 0.0f);
  }
  // Each unmasked gradient row sums to zero (softmax minus one-hot).
  for (int64_t n = 0; n < N; ++n) {
    double s = 0.0;
    for (int64_t i = 0; i < V; ++i) s += dlogits[n * V + i];
    EXPECT_NEAR(s, 0.0, 1e-6);
  }
}

TEST(CrossEntropy, PaddedVocabEqualsUnpaddedComputation) {
  // Large values in the padded columns must change nothing.
  const int64_t N = 5, V_real = 53, V = 64;
  const std::vector<float> real = random_normal(N * V_real, 21, 2.0f);
  const std::vector<int32_t> targets = make_targets(N, V_real, 22);
  std::vector<float> padded(N * V, 1e4f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < V_real; ++i) padded[n * V + i] = real[n * V_real + i];

  std::vector<float> loss_a(N), d_a(N * V_real), loss_b(N), d_b(N * V, 7.0f);  // 7: must be overwritten
  cross_entropy_forward_backward<float>(loss_a.data(), d_a.data(), real.data(), targets.data(),
                                        nullptr, N, V_real, V_real, 1.0f);
  cross_entropy_forward_backward<float>(loss_b.data(), d_b.data(), padded.data(), targets.data(),
                                        nullptr, N, V, V_real, 1.0f);
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_EQ(loss_a[n], loss_b[n]);  // same instructions on the same values: bitwise equal
    for (int64_t i = 0; i < V_real; ++i) EXPECT_EQ(d_a[n * V_real + i], d_b[n * V + i]);
    for (int64_t i = V_real; i < V; ++i) EXPECT_EQ(d_b[n * V + i], 0.0f);
  }
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  // dlogits is the gradient of sum_n losses[n] * grad_scale; the finite difference of that sum,
  // computed by the kernel itself in forward-only mode (dlogits = nullptr).
  const int64_t N = 3, V = 21, V_real = 19;
  const float grad_scale = 2.0f;
  std::vector<float> logits = random_normal(N * V, 31, 1.0f);
  const std::vector<int32_t> targets = make_targets(N, V_real, 32);
  const std::vector<float> mask = {1.0f, 0.75f, 1.0f};
  std::vector<float> dlogits(N * V);
  std::vector<float> losses(N);
  cross_entropy_forward_backward<float>(losses.data(), dlogits.data(), logits.data(),
                                        targets.data(), mask.data(), N, V, V_real, grad_scale);
  const auto total_loss = [&]() {
    std::vector<float> l(N);
    cross_entropy_forward_backward<float>(l.data(), static_cast<float*>(nullptr), logits.data(),
                                          targets.data(), mask.data(), N, V, V_real, grad_scale);
    double s = 0.0;
    for (float x : l) s += x;
    return grad_scale * s;
  };
  const std::vector<double> fd = testing::finite_difference(logits, total_loss, 1e-2);
  // Central differences with h = 1e-2 on an fp32 loss of magnitude ~3: truncation O(h^2) ~1e-4
  // and rounding ~1e-7 * 3 / h ~ 3e-5, against gradients of magnitude ~1.
  EXPECT_LT(max_scaled_error(dlogits, fd), 2e-3);
}

TEST(CrossEntropy, AliasedGradientOverwritesLogits) {
  const int64_t N = 6, V = 70, V_real = 67;
  const std::vector<float> logits = random_normal(N * V, 41, 4.0f);
  const std::vector<int32_t> targets = make_targets(N, V_real, 42);
  const std::vector<float> mask = {1, 1, 0, 1, 1, 1};
  std::vector<float> loss_a(N), d_a(N * V), loss_b(N);
  cross_entropy_forward_backward<float>(loss_a.data(), d_a.data(), logits.data(), targets.data(),
                                        mask.data(), N, V, V_real, 0.5f);
  std::vector<float> buf = logits;
  cross_entropy_forward_backward<float>(loss_b.data(), buf.data(), buf.data(), targets.data(),
                                        mask.data(), N, V, V_real, 0.5f);
  EXPECT_EQ(loss_a, loss_b);
  EXPECT_EQ(d_a, buf);

  std::vector<float> loss_c(N), loss_d(N);
  std::vector<bf16> lb = testing::to_bf16(logits), db(N * V);
  cross_entropy_forward_backward<bf16>(loss_c.data(), db.data(), lb.data(), targets.data(),
                                       mask.data(), N, V, V_real, 0.5f);
  cross_entropy_forward_backward<bf16>(loss_d.data(), lb.data(), lb.data(), targets.data(),
                                       mask.data(), N, V, V_real, 0.5f);
  EXPECT_EQ(loss_c, loss_d);
  EXPECT_EQ(testing::to_float(db), testing::to_float(lb));
}

TEST(CrossEntropy, Bf16MatchesFp32OnTheSameInputs) {
  // A wide vocabulary (several vector blocks and a tail) at realistic logit scale.
  const int64_t N = 9, V = 1040, V_real = 1000;
  const std::vector<float> logits = testing::round_to_bf16(random_normal(N * V, 51, 2.0f));
  const std::vector<int32_t> targets = make_targets(N, V_real, 52);
  std::vector<float> loss32(N), d32(N * V), loss16(N);
  std::vector<bf16> d16(N * V);
  const std::vector<bf16> logits16 = testing::to_bf16(logits);
  cross_entropy_forward_backward<float>(loss32.data(), d32.data(), logits.data(), targets.data(),
                                        nullptr, N, V, V_real, 1.0f);
  cross_entropy_forward_backward<bf16>(loss16.data(), d16.data(), logits16.data(), targets.data(),
                                       nullptr, N, V, V_real, 1.0f);
  // Identical inputs and identical fp32 arithmetic: the losses agree exactly.
  EXPECT_EQ(loss32, loss16);
  // The bf16 gradient is the fp32 gradient rounded once to bf16 (8 significant bits).
  for (int64_t i = 0; i < N * V; ++i) {
    EXPECT_EQ(d16[i].bits, bf16(d32[i]).bits) << "i=" << i;
  }
  const Reference ref = reference(logits, targets, nullptr, N, V, V_real, 1.0);
  EXPECT_LT(max_scaled_error(loss16, ref.loss), 1e-6);
  // bf16 storage: relative error up to 2^-9 per element.
  EXPECT_LT(max_scaled_error(testing::to_float(d16), ref.dlogits), 4e-3);
}

TEST(CrossEntropy, LargeVocabularyAgainstReference) {
  // Production-sized vocabulary row (GPT-2 padded to 50304) with extreme logits, so most exps
  // underflow and the sum is dominated by a few terms.
  const int64_t N = 2, V = 50304, V_real = 50257;
  std::vector<float> logits = random_normal(N * V, 61, 8.0f);
  logits[5] = 60.0f;
  logits[V + 50000] = -90.0f;
  const std::vector<int32_t> targets = {5, 50000};
  std::vector<float> losses(N), d(N * V);
  cross_entropy_forward_backward<float>(losses.data(), d.data(), logits.data(), targets.data(),
                                        nullptr, N, V, V_real, 1.0f);
  const Reference ref = reference(logits, targets, nullptr, N, V, V_real, 1.0);
  // fp32 sum of 50257 terms in 32 lanes: ~1e-6 relative.
  EXPECT_LT(max_scaled_error(losses, ref.loss), 1e-5);
  EXPECT_LT(max_scaled_error(d, ref.dlogits), 1e-5);
}

TEST(CrossEntropy, NonFiniteLogitsGiveNonFiniteLoss) {
  // Overflow detection downstream relies on NaN/Inf propagating into the loss.
  const int64_t N = 2, V = 20, V_real = 20;
  std::vector<float> logits = random_normal(N * V, 71);
  logits[3] = std::numeric_limits<float>::quiet_NaN();
  logits[V + 7] = std::numeric_limits<float>::infinity();
  const std::vector<int32_t> targets = {0, 1};
  std::vector<float> losses(N);
  cross_entropy_forward_backward<float>(losses.data(), static_cast<float*>(nullptr), logits.data(),
                                        targets.data(), nullptr, N, V, V_real, 1.0f);
  EXPECT_FALSE(std::isfinite(losses[0]));
  EXPECT_FALSE(std::isfinite(losses[1]));
}

}  // namespace
}  // namespace tessera::kernels

namespace tessera::kernels {
namespace {

// The vocabulary-split passes (cross_entropy_shard_*), run over a whole vocabulary as one shard,
// give the fused kernel's bits: the same row maximum, exp sum and gradient, the target entry
// rounded once (fp32 and bf16, masked and padded rows, in place too).
template <typename T>
void shard_passes_equal_fused() {
  const int64_t N = 9, V = 96, V_real = 83;
  std::vector<float> f = testing::random_normal(N * V, 5, 3.0f);
  std::vector<T> logits(N * V);
  for (int64_t i = 0; i < N * V; ++i) logits[i] = from_f32<T>(f[i]);
  std::vector<int32_t> targets(N);
  std::vector<float> mask(N);
  for (int64_t n = 0; n < N; ++n) {
    targets[n] = static_cast<int32_t>((n * 37) % V_real);
    mask[n] = n % 3 == 2 ? 0.0f : (n % 3 == 1 ? 0.5f : 1.0f);
  }
  const float grad_scale = 0.125f;
  std::vector<float> losses(N);
  std::vector<T> fused(N * V);
  cross_entropy_forward_backward(losses.data(), fused.data(), logits.data(), targets.data(),
                                 mask.data(), N, V, V_real, grad_scale);
  std::vector<float> max(N), sum(N), scale(N, 0.0f), coef(N, 0.0f);
  cross_entropy_shard_max(max.data(), logits.data(), mask.data(), N, V, V_real);
  cross_entropy_shard_sum_exp(sum.data(), logits.data(), max.data(), mask.data(), N, V, V_real);
  for (int64_t n = 0; n < N; ++n) {
    if (mask[n] == 0.0f) continue;
    const float loss = static_cast<float>(std::log(double(sum[n])) + double(max[n]) -
                                          double(to_f32(logits[n * V + targets[n]])));
    EXPECT_EQ(mask[n] * loss, losses[n]) << n;
    coef[n] = mask[n] * grad_scale;
    scale[n] = coef[n] / sum[n];
  }
  std::vector<T> shard(N * V), in_place = logits;
  cross_entropy_shard_gradient(shard.data(), logits.data(), max.data(), scale.data(), coef.data(),
                               targets.data(), 0, mask.data(), N, V, V_real);
  cross_entropy_shard_gradient(in_place.data(), in_place.data(), max.data(), scale.data(),
                               coef.data(), targets.data(), 0, mask.data(), N, V, V_real);
  for (int64_t i = 0; i < N * V; ++i) {
    EXPECT_EQ(to_f32(shard[i]), to_f32(fused[i])) << i;
    EXPECT_EQ(to_f32(in_place[i]), to_f32(fused[i])) << i;
  }
}

TEST(CrossEntropyShard, PassesGiveTheFusedKernelsBits) {
  shard_passes_equal_fused<float>();
  shard_passes_equal_fused<bf16>();
}

}  // namespace
}  // namespace tessera::kernels
