// 8-bit floats, storage only (arithmetic in fp32), for a KV cache of half the bf16 bytes
// (inference's --kv-cache-dtype fp8_e4m3 / fp8_e5m2, vLLM's names). The two formats of the OCP
// 8-bit floating point specification (OFP8, 2023), as PyTorch's float8_e4m3fn and float8_e5m2:
//
//   fp8_e4m3  1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN, so
//             the largest finite value is 448; subnormals m/8 * 2^-6 (the smallest 2^-9).
//   fp8_e5m2  1 sign, 5 exponent (bias 15), 2 mantissa bits: the top byte of an IEEE fp16, with
//             its infinities and NaNs; the largest finite value is 57344, the smallest 2^-16.
//
// From fp32: round to nearest even, and values beyond the largest finite one (infinities too)
// saturate to it with their sign — the saturating conversion vLLM's and NVIDIA's fp8 KV caches
// use (__NV_SATFINITE), since an infinity in a cached key would poison every later score. NaN
// stays NaN. To fp32: exact.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tessera/core/dtype.h"

namespace tessera {

namespace detail {

// |x| (finite, below the format's largest finite value) rounded to nearest even onto the grid
// of a float format with kMan mantissa bits and exponent bias kBias: the code's magnitude bits.
// Bit arithmetic as bf16's (a KV cache converts every key and value it stores): a normal value
// drops 23 - kMan mantissa bits with a round-to-nearest-even carry (which may carry into the
// exponent) and is rebiased; below the smallest normal 2^(1 - kBias) the value in units of the
// smallest subnormal is rounded by the FPU (adding and subtracting 1.5 * 2^23 rounds to nearest
// even in the default rounding mode; -ffp-contract=off keeps the two apart).
template <int kMan, int kBias>
uint8_t fp8_magnitude(float abs) {
  uint32_t u;
  std::memcpy(&u, &abs, 4);
  constexpr int kDrop = 23 - kMan;
  constexpr uint32_t kMinNormal = uint32_t{127 - kBias + 1} << 23;
  if (u >= kMinNormal) {
    u += (uint32_t{1} << (kDrop - 1)) - 1 + ((u >> kDrop) & 1);
    return static_cast<uint8_t>((u >> kDrop) - (uint32_t{127 - kBias} << kMan));
  }
  constexpr float kUnitsPerOne = static_cast<float>(1 << (kBias + kMan - 1));
  const float units = abs * kUnitsPerOne;  // exact (a power of two), below 2^kMan
  const float rounded = (units + 12582912.0f) - 12582912.0f;
  return static_cast<uint8_t>(rounded);
}

inline uint8_t sign_bit(float f) { return std::signbit(f) ? 0x80 : 0; }

}  // namespace detail

// The two formats (the definitions above): their rounding's parameters — mantissa bits,
// exponent bias, largest finite value and its code, the code a NaN becomes — and the decoding.
struct E4M3 {
  static constexpr int kMan = 3, kBias = 7;
  static constexpr float kMax = 448.0f;
  static constexpr uint8_t kMaxCode = 0x7e, kNanCode = 0x7f;
  static float to_float(uint8_t b) {
    const int field = (b >> 3) & 15, m = b & 7;
    float v;
    if (field == 15 && m == 7)
      v = std::nanf("");
    else if (field == 0)
      v = std::ldexp(static_cast<float>(m), -9);
    else
      v = std::ldexp(1.0f + static_cast<float>(m) / 8, field - 7);
    return (b & 0x80) ? -v : v;
  }
};

struct E5M2 {
  static constexpr int kMan = 2, kBias = 15;
  static constexpr float kMax = 57344.0f;
  static constexpr uint8_t kMaxCode = 0x7b, kNanCode = 0x7e;
  static float to_float(uint8_t b) { return fp16::to_float(static_cast<uint16_t>(b << 8)); }
};

// One byte of a Format (E4M3 or E5M2), a type of its own per format for the kernels' overloads.
template <typename Format>
struct fp8 {
  uint8_t bits;
  fp8() = default;
  explicit fp8(float f) : bits(from_float(f)) {}
  explicit operator float() const { return to_float(bits); }
  static constexpr float kMax = Format::kMax;
  static uint8_t from_float(float f) {
    if (std::isnan(f)) return detail::sign_bit(f) | Format::kNanCode;
    const float a = std::fabs(f);
    return detail::sign_bit(f) |
           (a >= kMax ? Format::kMaxCode : detail::fp8_magnitude<Format::kMan, Format::kBias>(a));
  }
  static float to_float(uint8_t b) { return Format::to_float(b); }
};
using fp8_e4m3 = fp8<E4M3>;
using fp8_e5m2 = fp8<E5M2>;

template <typename Format>
inline float to_f32(fp8<Format> x) {
  return Format::to_float(x.bits);
}
template <>
inline fp8_e4m3 from_f32<fp8_e4m3>(float x) {
  return fp8_e4m3(x);
}
template <>
inline fp8_e5m2 from_f32<fp8_e5m2>(float x) {
  return fp8_e5m2(x);
}

}  // namespace tessera
