// 8-bit floats (core/fp8.h) against values worked out by hand from the OCP 8-bit format
// definitions: E4M3 (bias 7, no infinities, S.1111.111 NaN, largest 448, smallest 2^-9) and
// E5M2 (bias 15, fp16's top byte, largest 57344, smallest 2^-16).
#include "tessera/core/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace tessera {
namespace {

TEST(Fp8E4M3, KnownCodes) {
  EXPECT_EQ(fp8_e4m3(1.0f).bits, 0x38);          // exponent 7 = bias, mantissa 0
  EXPECT_EQ(fp8_e4m3(-2.0f).bits, 0xC0);         // sign, exponent 8
  EXPECT_EQ(fp8_e4m3(448.0f).bits, 0x7E);        // 1.75 * 2^8, the largest
  EXPECT_EQ(fp8_e4m3(0.015625f).bits, 0x08);     // 2^-6, the smallest normal
  EXPECT_EQ(fp8_e4m3(0.001953125f).bits, 0x01);  // 2^-9, the smallest subnormal
  EXPECT_EQ(fp8_e4m3(0.013671875f).bits, 0x07);  // 7 * 2^-9, the largest subnormal
  EXPECT_EQ(fp8_e4m3(0.0f).bits, 0x00);
  EXPECT_EQ(fp8_e4m3(-0.0f).bits, 0x80);
  EXPECT_EQ(fp8_e4m3(0.3125f).bits, 0x2A);  // 1.25 * 2^-2: exponent 5, mantissa 2
}

TEST(Fp8E4M3, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(fp8_e4m3(1.0625f).bits, 0x38);        // halfway 1 | 1.125: even mantissa 0
  EXPECT_EQ(fp8_e4m3(1.1875f).bits, 0x3A);        // halfway 1.125 | 1.25: even mantissa 2
  EXPECT_EQ(fp8_e4m3(1.07f).bits, 0x39);          // above halfway: 1.125
  EXPECT_EQ(fp8_e4m3(1.96875f).bits, 0x40);       // halfway 1.875 | 2: up to 2 (exponent carries)
  EXPECT_EQ(fp8_e4m3(0.0009765625f).bits, 0x00);  // 2^-10, halfway 0 | 2^-9: even, 0
  EXPECT_EQ(fp8_e4m3(0.0029296875f).bits, 0x02);  // 1.5 * 2^-9: halfway 1 | 2: even 2
  EXPECT_EQ(fp8_e4m3(460.0f).bits, 0x7E);         // beyond 448: saturates
  EXPECT_EQ(fp8_e4m3(-1e30f).bits, 0xFE);
  EXPECT_EQ(fp8_e4m3(std::numeric_limits<float>::infinity()).bits, 0x7E);
  EXPECT_EQ(fp8_e4m3(std::nanf("")).bits & 0x7F, 0x7F);
}

TEST(Fp8E4M3, DecodesEveryCode) {
  for (int b = 0; b < 256; ++b) {
    const int e = (b >> 3) & 15, m = b & 7;
    const float v = fp8_e4m3::to_float(static_cast<uint8_t>(b));
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    const double mag = e == 0 ? m / 512.0 : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
    EXPECT_EQ(double(v), (b & 0x80) ? -mag : mag) << b;
    EXPECT_EQ(fp8_e4m3(v).bits, b) << "round trip of " << b;
  }
}

TEST(Fp8E5M2, KnownCodesRoundingAndSaturation) {
  EXPECT_EQ(fp8_e5m2(1.0f).bits, 0x3C);
  EXPECT_EQ(fp8_e5m2(57344.0f).bits, 0x7B);  // 1.75 * 2^15, the largest
  EXPECT_EQ(fp8_e5m2(1e6f).bits, 0x7B);      // saturates
  EXPECT_EQ(fp8_e5m2(-std::numeric_limits<float>::infinity()).bits, 0xFB);
  EXPECT_EQ(fp8_e5m2(0.0000152587890625f).bits, 0x01);  // 2^-16, the smallest subnormal
  EXPECT_EQ(fp8_e5m2(1.125f).bits, 0x3C);               // halfway 1 | 1.25: even
  EXPECT_EQ(fp8_e5m2(1.375f).bits, 0x3E);               // halfway 1.25 | 1.5: even (1.5)
  EXPECT_TRUE(std::isnan(fp8_e5m2::to_float(fp8_e5m2(std::nanf("")).bits)));
  EXPECT_TRUE(std::isinf(fp8_e5m2::to_float(0x7C)));  // the format's own infinity decodes
  for (int b = 0; b < 256; ++b) {
    const int e = (b >> 2) & 31, m = b & 3;
    const float v = fp8_e5m2::to_float(static_cast<uint8_t>(b));
    if (e == 31) continue;
    const double mag = e == 0 ? m * std::ldexp(1.0, -16) : (1 + m / 4.0) * std::ldexp(1.0, e - 15);
    EXPECT_EQ(double(v), (b & 0x80) ? -mag : mag) << b;
    EXPECT_EQ(fp8_e5m2(v).bits, b) << "round trip of " << b;
  }
}

// The nearest code by search: every finite non-negative code's value in double, the closest to
// |x| (a tie to the code with the even mantissa, i.e. the even code), saturating at the largest.
template <typename T>
uint8_t nearest_by_search(float x, int codes) {
  const double a = std::fabs(double(x));
  int best = 0;
  for (int c = 1; c < codes; ++c) {
    const double d = std::fabs(T::to_float(static_cast<uint8_t>(c)) - a),
                 e = std::fabs(T::to_float(static_cast<uint8_t>(best)) - a);
    if (d < e || (d == e && c % 2 == 0)) best = c;
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

// The bit arithmetic of from_float against the search, on values spread over every binade of
// both formats (subnormals, ties, near the largest value) and random ones.
TEST(Fp8, RoundingEqualsTheNearestCodeBySearch) {
  std::vector<float> xs;
  for (int c = 0; c < 127; ++c) {  // each code's value, its neighbours and the midpoints
    for (float v : {fp8_e4m3::to_float(static_cast<uint8_t>(c)),
                    fp8_e5m2::to_float(static_cast<uint8_t>(c))}) {
      xs.push_back(v);
      xs.push_back(std::nextafter(v, 0.0f));
      xs.push_back(std::nextafter(v, 1e9f));
    }
    for (float v : {(fp8_e4m3::to_float(c) + fp8_e4m3::to_float(c + 1)) / 2,
                    (fp8_e5m2::to_float(c) + fp8_e5m2::to_float(c + 1)) / 2})
      if (std::isfinite(v)) xs.push_back(v);
  }
  uint32_t state = 12345;
  for (int i = 0; i < 20000; ++i) {
    state = state * 1664525u + 1013904223u;
    xs.push_back(std::ldexp(1.0f + (state >> 8) / 16777216.0f, static_cast<int>(state % 40) - 20));
  }
  for (float x : xs)
    for (float v : {x, -x}) {
      if (std::fabs(v) < fp8_e4m3::kMax) {
        ASSERT_EQ(fp8_e4m3(v).bits, nearest_by_search<fp8_e4m3>(v, 127)) << "e4m3 of " << v;
      }
      if (std::fabs(v) < fp8_e5m2::kMax) {
        ASSERT_EQ(fp8_e5m2(v).bits, nearest_by_search<fp8_e5m2>(v, 124)) << "e5m2 of " << v;
      }
    }
}

}  // namespace
}  // namespace tessera
