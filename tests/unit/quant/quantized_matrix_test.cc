// The weight-only formats (quant/quantized_matrix.h): hand-computed codes, packed bytes and
// scales of known rows, decoding within each format's half step of the original weights on
// random matrices, and shapes or values a format cannot take refused with what is expected.
#include "tessera/quant/quantized_matrix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/quant/fp6.h"

namespace tessera::quant {
namespace {

float half(uint16_t bits) {
  fp16 h;
  h.bits = bits;
  return to_f32(h);
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& x : w) x = normal(rng);
  w[5] = 0.11f;  // an outlier, as trained weights have
  return w;
}

TEST(QuantizedMatrix, Fp6RowOfKnownValuesGivesHandComputedBytes) {
  // max|row| = 28, so the scale is 1 (fp16 0x3c00) and the codes are 28 -> 0x1f,
  // -14 -> 0x3b, 0.5 -> 0x08, 0 -> 0x00, packed: 0x7f 0xb2 0x00.
  const float row[4] = {28.0f, -14.0f, 0.5f, 0.0f};
  const QuantizedMatrix q = quantize(row, 1, 4, QuantFormat::kFp6);
  ASSERT_EQ(q.codes.size(), 3u);
  EXPECT_EQ(q.codes[0], 0x7f);
  EXPECT_EQ(q.codes[1], 0xb2);
  EXPECT_EQ(q.codes[2], 0x00);
  EXPECT_EQ(q.scales, std::vector<uint16_t>{0x3c00});
  EXPECT_EQ(dequantize(q), std::vector<float>(row, row + 4));  // exact here
  EXPECT_EQ(q.bytes(), 3 + 2);
}

TEST(QuantizedMatrix, Q8_0AndQ4BlocksOfKnownValues) {
  std::vector<float> w(64);
  for (int i = 0; i < 64; ++i) w[i] = i < 32 ? static_cast<float>(i - 16) : 0.5f * (i - 32);
  const QuantizedMatrix q8 = quantize(w.data(), 1, 64, QuantFormat::kQ8_0);
  // Block 0: amax 16, d = 16/127; q = round(w * 127/16): -16 -> -127, 1 -> 8 (7.94),
  // 4 -> 32 (31.75), 15 -> 119 (119.06).
  EXPECT_EQ(static_cast<int8_t>(q8.codes[0]), -127);
  EXPECT_EQ(static_cast<int8_t>(q8.codes[17]), 8);
  EXPECT_EQ(static_cast<int8_t>(q8.codes[20]), 32);
  EXPECT_EQ(static_cast<int8_t>(q8.codes[31]), 119);
  EXPECT_EQ(q8.scales[0], fp16(16.0f / 127.0f).bits);
  const QuantizedMatrix q4 = quantize(w.data() + 32, 1, 32, QuantFormat::kQ4);
  // w = j / 2: min 0, d = 15.5 / 15; code(w) = trunc(w / d + 0.5): w16 = 8 -> 8, w15 = 7.5 -> 7,
  // w31 = 15.5 -> 15. Byte j: weight j low nibble, weight j + 16 high.
  EXPECT_EQ(q4.codes[0], 0x80);
  EXPECT_EQ(q4.codes[15], 0xf7);
  EXPECT_EQ(q4.scales[0], fp16(15.5f / 15.0f).bits);
  EXPECT_EQ(q4.mins[0], fp16(0.0f).bits);
}

TEST(QuantizedMatrix, DecodingIsWithinHalfAStepOfTheWeights) {
  const int64_t rows = 7, cols = 192;
  const std::vector<float> w = random_matrix(rows, cols, 11);
  for (QuantFormat f :
       {QuantFormat::kFp6, QuantFormat::kInt8, QuantFormat::kQ8_0, QuantFormat::kQ4}) {
    for (int64_t group : {32, 64}) {
      if (f != QuantFormat::kQ4 && group == 64) continue;
      const QuantizedMatrix q = quantize(w.data(), rows, cols, f, group);
      const std::vector<float> back = dequantize(q);
      double worst = 0;  // in units of the allowed error
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t g = r * q.groups_per_row() + c / q.group;
          const double d = half(q.scales[g]), x = w[r * cols + c], y = back[r * cols + c];
          double allowed;
          if (f == QuantFormat::kFp6) {
            // Half an ulp of e3m2 at x's binade (2 mantissa bits: 1/8 of the binade's base),
            // at least half the subnormal step 0.0625, in units of the scale.
            const double a = std::fabs(x) / d;
            const double base =
                a < 0.25 ? 0.25 : std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))));
            allowed = d * base / 8 * (1 + 1e-6);
            EXPECT_EQ(y, fp6_decode(fp6_encode(static_cast<float>(x / d))) * static_cast<float>(d));
          } else if (f == QuantFormat::kQ4) {
            // Half a step, and the fp16 rounding (2^-11 relative) of d times the code (<= 15)
            // and of the minimum.
            const double lo = half(q.mins[g]);
            allowed = d / 2 + (15 * d + std::fabs(lo)) * std::ldexp(1.0, -11) + 1e-9;
          } else {
            // Half a step, and the fp16 rounding of d times the code (|x| / d).
            allowed = d / 2 + std::fabs(x) * std::ldexp(1.0, -11) + 1e-9;
          }
          worst = std::max(worst, std::fabs(x - y) / allowed);
        }
      EXPECT_LE(worst, 1.0) << quant_format_name(f) << " group " << group;
    }
  }
}

TEST(QuantizedMatrix, ShapesAndValuesAFormatCannotTakeAreRefused) {
  const std::vector<float> w(6 * 40, 0.5f);
  const auto message = [&](QuantFormat f, int64_t cols, int64_t group = 32) {
    try {
      quantize(w.data(), 6, cols, f, group);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(QuantFormat::kFp6, 30),
            "fp6 packs 4 weights in 3 bytes: 30 columns is not a multiple of 4");
  EXPECT_EQ(message(QuantFormat::kQ8_0, 40),
            "q8_0 quantizes blocks of 32 weights: 40 columns is not a multiple of 32");
  EXPECT_EQ(message(QuantFormat::kQ4, 32, 48), "q4: the group size must be 32 or 64, got 48");
  EXPECT_EQ(message(QuantFormat::kInt8, 40), "no error");
  std::vector<float> bad(8, 1.0f);
  bad[6] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(quantize(bad.data(), 2, 4, QuantFormat::kInt8), Error);
  std::vector<float> huge(4, 3e9f);
  EXPECT_THROW(quantize(huge.data(), 1, 4, QuantFormat::kFp6), Error);  // scale beyond fp16
  EXPECT_EQ(parse_quant_format("q8_0"), QuantFormat::kQ8_0);
  EXPECT_THROW(parse_quant_format("nf4"), Error);
}

}  // namespace
}  // namespace tessera::quant
