// Llama 3.x's RoPE frequency rescaling (rope_frequencies.h) against the definition evaluated in
// double (Transformers' _compute_llama3_parameters, modeling_rope_utils.py), and the rotation
// kernel using the rescaled frequencies.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "tessera/kernels/rope.h"
#include "tessera/kernels/rope_frequencies.h"
#include "testing/numeric.h"
#include "testing/qkv_shape.h"

namespace tessera::kernels {
namespace {

// The definition in double: wavelen = 2π / f; above L / low: f / factor; below L / high: f;
// between: (1 - s) f / factor + s f with s = (L / wavelen - low) / (high - low).
double llama3_reference(double f, const RopeScaling& r) {
  const double L = r.original_max_position_embeddings, wavelen = 2 * std::numbers::pi / f;
  if (wavelen > L / r.low_freq_factor) return f / r.factor;
  if (wavelen < L / r.high_freq_factor) return f;
  const double s = (L / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  return (1 - s) * f / r.factor + s * f;
}

TEST(RopeScaling, OffIsPlainRope) {
  const std::vector<float> f = rope_inv_freq(16, 10000.0f);
  ASSERT_EQ(f.size(), 8u);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(f[i], 1.0f / std::pow(10000.0f, static_cast<float>(2 * i) / 16.0f)) << i;
}

TEST(RopeScaling, Llama31FrequenciesMatchTheDefinition) {
  // Llama 3.1 8B: head dim 128, theta 500000, factor 8, low 1, high 4, original 8192.
  RopeScaling r;
  r.llama3 = true;
  const std::vector<float> plain = rope_inv_freq(128, 500000.0f);
  const std::vector<float> scaled = rope_inv_freq(128, 500000.0f, r);
  int low = 0, high = 0, medium = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    const double want = llama3_reference(plain[i], r);
    // fp32 arithmetic (a few roundings of 2^-24) against double.
    EXPECT_NEAR(scaled[i], want, 1e-6 * want) << i;
    if (wavelen > 8192) {
      ++low;
      EXPECT_EQ(scaled[i], plain[i] / 8.0f) << i;  // one fp32 division, as Transformers
    } else if (wavelen < 2048) {
      ++high;
      EXPECT_EQ(scaled[i], plain[i]) << i;
    } else {
      ++medium;
    }
  }
  // The three bands of this shape (wavelengths 2π·500000^(i/64)): each one is exercised.
  EXPECT_EQ(high, 29);
  EXPECT_EQ(medium, 6);
  EXPECT_EQ(low, 29);
}

TEST(RopeScaling, KernelRotatesByTheScaledFrequencies) {
  using Shape = testing::QkvShape;
  const Shape s{1, 6, 2, 1, 16};
  RopeScaling r;
  r.llama3 = true;
  r.factor = 4.0f;
  r.original_max_position_embeddings = 64;  // wavelengths 16..64 are the band at this HD
  const std::vector<int32_t> pos = {0, 3, 9, 15, 40, 63};
  const std::vector<float> x = testing::random_normal(s.qkv_size(), 5);
  std::vector<float> y = x;
  rope_forward(y.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, 500000.0f, false, 0, r);
  const std::vector<float> f = rope_inv_freq(s.HD, 500000.0f, r);
  std::vector<double> ref(x.begin(), x.end());
  for (int64_t t = 0; t < s.T; ++t)
    for (int head = 0; head < s.NH + s.KV; ++head)
      for (int i = 0; i < s.HD / 2; ++i) {
        const int64_t at = t * s.width() + int64_t{head} * s.HD + i;
        const double angle = static_cast<float>(pos[t]) * f[i];  // the fp32 product
        const double a = x[at], b = x[at + s.HD / 2];
        ref[at] = a * std::cos(angle) - b * std::sin(angle);
        ref[at + s.HD / 2] = b * std::cos(angle) + a * std::sin(angle);
      }
  EXPECT_LT(testing::max_scaled_error(y, ref), 1e-6);
  // And the scaling changed something: the unscaled rotation differs by far more.
  std::vector<float> plain = x;
  rope_forward(plain.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, 500000.0f);
  EXPECT_GT(testing::max_scaled_error(plain, ref), 1e-2);
}

}  // namespace
}  // namespace tessera::kernels
