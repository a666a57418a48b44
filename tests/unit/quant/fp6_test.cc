// FP6 e3m2 (quant/fp6.h) against hand-worked values: the 32 magnitudes from the format's
// definition, halfway cases rounding away from zero, subnormals, clamping at ±28, ±0, every code
// decoding to itself, and the packed bytes of known codes computed by hand.
#include "tessera/quant/fp6.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace tessera::quant {
namespace {

// The magnitude of code e·m by the definition (double).
double magnitude(int e, int m) {
  return e == 0 ? m / 16.0 : (1 + m / 4.0) * std::ldexp(1.0, e - 3);
}

TEST(Fp6, EveryCodeDecodesToTheDefinitionAndEncodesBackToItself) {
  for (int code = 0; code < 64; ++code) {
    const double expected = (code & 0x20 ? -1 : 1) * magnitude((code >> 2) & 7, code & 3);
    const float v = fp6_decode(static_cast<uint8_t>(code));
    EXPECT_EQ(static_cast<double>(v), expected) << code;
    EXPECT_EQ(std::signbit(v), (code & 0x20) != 0) << code;  // -0 keeps its sign
    EXPECT_EQ(fp6_encode(v), code) << code;
  }
  EXPECT_EQ(fp6_decode(0x1f), 28.0f);
  EXPECT_EQ(fp6_decode(0x04), 0.25f);    // the smallest normal
  EXPECT_EQ(fp6_decode(0x01), 0.0625f);  // the smallest subnormal
}

TEST(Fp6, HandWorkedRoundingTiesAwayFromZeroAndClamps) {
  EXPECT_EQ(fp6_encode(0.0f), 0x00);
  EXPECT_EQ(fp6_encode(-0.0f), 0x20);
  EXPECT_EQ(fp6_encode(0.03125f), 0x01);  // halfway between 0 and 0.0625: away from zero
  EXPECT_EQ(fp6_encode(0.0312f), 0x00);
  EXPECT_EQ(fp6_encode(-0.03125f), 0x21);
  EXPECT_EQ(fp6_encode(0.21875f), 0x04);  // halfway 0.1875 | 0.25 (subnormal to normal)
  EXPECT_EQ(fp6_encode(1.125f), 0x0d);    // halfway 1 | 1.25 -> 1.25 = e3 m1
  EXPECT_EQ(fp6_encode(1.12f), 0x0c);     // 1.0 = e3 m0
  EXPECT_EQ(fp6_encode(1.875f), 0x10);    // halfway 1.75 | 2: carries into e4 m0
  EXPECT_EQ(fp6_encode(-14.0f), 0x3b);    // sign, e6 m3
  EXPECT_EQ(fp6_encode(26.0f), 0x1f);     // halfway 24 | 28 -> 28
  EXPECT_EQ(fp6_encode(25.9f), 0x1e);     // 24
  EXPECT_EQ(fp6_encode(28.0f), 0x1f);
  EXPECT_EQ(fp6_encode(1e9f), 0x1f);  // clamped
  EXPECT_EQ(fp6_encode(-29.0f), 0x3f);
  // Every midpoint of neighbouring magnitudes goes up, anything just below it down.
  std::vector<double> values;
  for (int e = 0; e < 8; ++e)
    for (int m = 0; m < 4; ++m) values.push_back(magnitude(e, m));
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    const double mid = (values[i] + values[i + 1]) / 2;
    EXPECT_EQ(fp6_encode(static_cast<float>(mid)), static_cast<int>(i + 1)) << mid;
    EXPECT_EQ(fp6_encode(std::nextafter(static_cast<float>(mid), 0.0f)), static_cast<int>(i))
        << mid;
  }
}

TEST(Fp6, FourCodesPackIntoThreeBytesMostSignificantBitFirst) {
  // By hand: b0 = c0 << 2 | c1 >> 4, b1 = (c1 & 15) << 4 | c2 >> 2, b2 = (c2 & 3) << 6 | c3.
  const uint8_t codes[8] = {0x3f, 0x00, 0x2a, 0x15, 0x01, 0x02, 0x03, 0x04};
  uint8_t bytes[6];
  fp6_pack(codes, 8, bytes);
  const uint8_t expected[6] = {0xfc, 0x0a, 0x95, 0x04, 0x20, 0xc4};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(bytes[i], expected[i]) << i;
  std::mt19937 rng(3);
  std::vector<uint8_t> random(64), packed(48), back(64);
  for (uint8_t& c : random) c = static_cast<uint8_t>(rng() & 63);
  fp6_pack(random.data(), 64, packed.data());
  fp6_unpack(packed.data(), 64, back.data());
  EXPECT_EQ(back, random);
}

}  // namespace
}  // namespace tessera::quant
