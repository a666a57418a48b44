#include "tessera/kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "testing/numeric.h"
#include "testing/qkv_shape.h"

namespace tessera::kernels {
namespace {

using Shape = testing::QkvShape;

// The contract's angle (fp32 inv_freq and fp32 product, as Transformers computes it), then the
// rotation in double.
std::vector<double> reference_rope(const std::vector<float>& x, const std::vector<int32_t>& pos,
                                   const Shape& s, float theta) {
  std::vector<double> out(x.begin(), x.end());
  const int half = s.HD / 2;
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t t = 0; t < s.T; ++t) {
      for (int head = 0; head < s.NH + s.KV; ++head) {
        const int64_t base = (b * s.T + t) * s.width() + int64_t{head} * s.HD;
        for (int i = 0; i < half; ++i) {
          const float inv_freq =
              1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(s.HD));
          const float angle = static_cast<float>(pos[t]) * inv_freq;
          const double c = std::cos(double(angle)), sn = std::sin(double(angle));
          const double a = x[base + i], bb = x[base + i + half];
          out[base + i] = a * c - bb * sn;
          out[base + i + half] = bb * c + a * sn;
        }
      }
    }
  }
  return out;
}

TEST(RopeForward, MatchesDoubleReference) {
  const Shape s{2, 13, 3, 1, 16};
  const float theta = 10000.0f;
  const std::vector<int32_t> pos = {0, 1, 2, 3, 7, 31, 100, 511, 1000, 2047, 4095, 8191, 123456};
  const std::vector<float> x = testing::random_normal(s.qkv_size(), 1);
  std::vector<float> y = x;
  rope_forward(y.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, theta);
  const std::vector<double> ref = reference_rope(x, pos, s, theta);
  // Only fp32 cos/sin (<= 1 ulp) and fp32 products: ~1e-7 of the values' scale.
  EXPECT_LT(testing::max_scaled_error(y, ref), 1e-6);
  // Values are left untouched.
  for (int64_t row = 0; row < s.B * s.T; ++row)
    for (int64_t c = (s.NH + s.KV) * s.HD; c < s.width(); ++c)
      ASSERT_EQ(y[row * s.width() + c], x[row * s.width() + c]);
}

TEST(RopeForward, LlamaThetaAndGqa) {
  const Shape s{1, 9, 4, 2, 8};
  const float theta = 500000.0f;
  const std::vector<int32_t> pos = {5, 6, 7, 8, 9, 10, 11, 12, 13};
  const std::vector<float> x = testing::random_normal(s.qkv_size(), 2);
  std::vector<float> y = x;
  rope_forward(y.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, theta);
  EXPECT_LT(testing::max_scaled_error(y, reference_rope(x, pos, s, theta)), 1e-6);
}

TEST(RopeBackward, IsTheTranspose) {
  const Shape s{2, 11, 2, 2, 24};
  std::vector<int32_t> pos(s.T);
  for (int64_t t = 0; t < s.T; ++t) pos[t] = static_cast<int32_t>(3 * t + 17);
  const std::vector<float> x = testing::random_normal(s.qkv_size(), 3);
  const std::vector<float> y = testing::random_normal(s.qkv_size(), 4);
  std::vector<float> rx = x, ry = y;
  rope_forward(rx.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, 10000.0f);
  rope_backward(ry.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, 10000.0f);
  // <R x, y> = <x, R^T y>; both sides are fp32-rounded sums of ~1000 O(1) terms.
  const double lhs = testing::dot(rx, y), rhs = testing::dot(x, ry);
  EXPECT_NEAR(lhs, rhs, 1e-5 * (std::fabs(lhs) + 1.0));
  // And the transpose of a rotation is its inverse.
  rope_backward(rx.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, 10000.0f);
  EXPECT_LT(testing::max_scaled_error(rx, x), 1e-6);
}

TEST(RopePositions, OffsetShardEqualsSliceOfFullSequence) {
  // A sequence-parallel rank holding tokens [6, 10) of a 10-token sequence passes their global
  // positions and must reproduce the corresponding rows of the full computation exactly.
  const Shape full{1, 10, 2, 1, 16};
  const Shape part{1, 4, 2, 1, 16};
  std::vector<int32_t> pos_full(full.T), pos_part(part.T);
  for (int t = 0; t < full.T; ++t) pos_full[t] = t;
  for (int t = 0; t < part.T; ++t) pos_part[t] = 6 + t;
  const std::vector<float> x = testing::random_normal(full.qkv_size(), 5);
  std::vector<float> y_full = x;
  std::vector<float> y_part(x.begin() + 6 * full.width(), x.end());
  rope_forward(y_full.data(), pos_full.data(), full.B, full.T, full.NH, full.KV, full.HD, 1e4f);
  rope_forward(y_part.data(), pos_part.data(), part.B, part.T, part.NH, part.KV, part.HD, 1e4f);
  for (int64_t i = 0; i < part.qkv_size(); ++i) ASSERT_EQ(y_part[i], y_full[6 * full.width() + i]);
}

TEST(RopePositions, PerSampleRowsMatchTheReferenceWithFewerOrMoreRowsThanPositions) {
  // Per-sample positions in [0, max_position): a decode step has fewer rows than positions (a
  // table row per token), a packed batch more (a table of every position). Both are the
  // contract's rotation, and the same bits as passing the positions as one sample's.
  const float theta = 10000.0f;
  const auto check = [&](const Shape& s, const std::vector<int32_t>& pos, int64_t max_position) {
    const std::vector<float> x = testing::random_normal(s.qkv_size(), 7);
    std::vector<float> y = x, y_positions = x;
    rope_forward(y.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, theta, /*per_sample=*/true,
                 max_position);
    rope_forward(y_positions.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, theta);
    EXPECT_LT(testing::max_scaled_error(y, reference_rope(x, pos, s, theta)), 1e-6);
    for (int64_t i = 0; i < s.qkv_size(); ++i) ASSERT_EQ(y[i], y_positions[i]) << i;
  };
  check(Shape{1, 5, 3, 1, 16}, {3, 0, 4095, 17, 5}, 4096);
  check(Shape{1, 12, 2, 2, 8}, {0, 1, 2, 3, 0, 1, 0, 1, 2, 0, 3, 2}, 4);
}

TEST(RopeBf16, IsTheFp32RotationRoundedOnce) {
  // Head dimensions whose halves are a partial vector (8) and full ones plus a tail (20); the
  // second shape rotates 655 360 elements, so that a multiply-add fused where the fp32 rotation
  // rounds twice would show (it moves about 2 in 10^5 of the bf16 results).
  const std::vector<Shape> shapes = {{2, 7, 3, 1, 16}, {4, 256, 12, 4, 40}};
  for (const Shape& s : shapes) {
    std::vector<int32_t> pos(s.T);
    for (int64_t t = 0; t < s.T; ++t) pos[t] = static_cast<int32_t>(t * 37 % 4001);
    const std::vector<float> x = testing::round_to_bf16(testing::random_normal(s.qkv_size(), 6));
    // Same fp32 arithmetic on the same (exact bf16) values, then one rounding to nearest even:
    // the bits of the fp32 rotation's result rounded by core/dtype.h, on every target (no
    // result here is an fp32 subnormal, which avx512bf16's bf16 stores give as zero).
    for (bool backward : {false, true}) {
      std::vector<float> y32 = x;
      std::vector<bf16> y16 = testing::to_bf16(x);
      if (backward) {
        rope_backward(y32.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, 10000.0f);
        rope_backward(y16.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, 10000.0f);
      } else {
        rope_forward(y32.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, 10000.0f);
        rope_forward(y16.data(), pos.data(), s.B, s.T, s.NH, s.KV, s.HD, 10000.0f);
      }
      for (size_t i = 0; i < y16.size(); ++i)
        ASSERT_EQ(y16[i].bits, from_f32<bf16>(y32[i]).bits)
            << "HD " << s.HD << (backward ? ", backward" : ", forward") << ", element " << i;
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
