#include "tessera/quant/fp6.h"

#include <cmath>

namespace tessera::quant {

uint8_t fp6_encode(float x) {
  const uint8_t sign = std::signbit(x) ? 0x20 : 0;
  // In double, where every step below is exact for fp32 inputs.
  double a = std::fabs(static_cast<double>(x));
  if (a >= kFp6Max) return sign | 0x1f;
  // The binade of a: 2^(e-3) <= a < 2^(e-2) for e >= 1; below 0.25 the subnormal spacing.
  int e = 1;
  while (e < 7 && a >= std::ldexp(1.0, e - 2)) ++e;
  if (a < 0.25) e = 0;
  const double ulp = e == 0 ? 0.0625 : std::ldexp(1.0, e - 3) / 4;
  // Half an ulp added, then truncated: ties away from zero. The result may carry into the next
  // binade (e.g. 1.9 -> 2.0), which is still a representable value.
  const double q = std::floor(a / ulp + 0.5) * ulp;
  a = std::fmin(q, kFp6Max);
  if (a < 0.25) return sign | static_cast<uint8_t>(a / 0.0625);  // subnormal (or zero)
  int exp = 0;
  const double frac = std::frexp(a, &exp);  // a = frac * 2^exp, frac in [0.5, 1)
  const int biased = exp - 1 + 3;           // a = (2 frac) * 2^(exp - 1)
  const int mantissa = static_cast<int>((2 * frac - 1) * 4);
  return sign | static_cast<uint8_t>(biased << 2 | mantissa);
}

float fp6_decode(uint8_t code) {
  const int e = (code >> 2) & 7, m = code & 3;
  const float magnitude = e == 0 ? static_cast<float>(m) * 0.0625f
                                 : std::ldexp(1.0f + static_cast<float>(m) / 4, e - 3);
  return (code & 0x20) ? -magnitude : magnitude;
}

void fp6_pack(const uint8_t* codes, int64_t n, uint8_t* bytes) {
  for (int64_t i = 0; i < n; i += 4, bytes += 3) {
    const uint8_t c0 = codes[i] & 63, c1 = codes[i + 1] & 63, c2 = codes[i + 2] & 63,
                  c3 = codes[i + 3] & 63;
    bytes[0] = static_cast<uint8_t>(c0 << 2 | c1 >> 4);
    bytes[1] = static_cast<uint8_t>((c1 & 15) << 4 | c2 >> 2);
    bytes[2] = static_cast<uint8_t>((c2 & 3) << 6 | c3);
  }
}

void fp6_unpack(const uint8_t* bytes, int64_t n, uint8_t* codes) {
  for (int64_t i = 0; i < n; i += 4, bytes += 3) {
    codes[i] = bytes[0] >> 2;
    codes[i + 1] = static_cast<uint8_t>((bytes[0] & 3) << 4 | bytes[1] >> 4);
    codes[i + 2] = static_cast<uint8_t>((bytes[1] & 15) << 2 | bytes[2] >> 6);
    codes[i + 3] = bytes[2] & 63;
  }
}

}  // namespace tessera::quant
