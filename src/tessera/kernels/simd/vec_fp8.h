// 8-bit floats (core/fp8.h) on the vector layer, composed from its functions so every target
// shares one definition: 16 fp8 values widened to fp32 exactly, whole blocks and counted tails
// (load(p, n): lanes [0, n) read, the others zero, nothing outside them touched). Stores are
// not needed (a KV cache row is written once per token, by scalar code).
//
// Included by simd/vec.h; do not include directly.

#include <cmath>
#include <cstring>
#include <limits>

#include "tessera/core/fp8.h"

TESSERA_TARGET_BEGIN

// Sign, exponent field and kMan mantissa bits to fp32: a normal magnitude's bits move under the
// fp32 exponent with the bias changed; a subnormal one (field 0) is its mantissa times the
// smallest spacing; codes at or above kNanFrom are NaN and kInf (when the format has one) is
// infinity.
template <int kMan, int kBias, int kNanFrom, int kInf>
[[gnu::always_inline]] inline VecF widen_fp8(VecI b) {
  const VecI mag = b & splat_i(0x7f);
  const VecF normal = bits_to_float(shift_left(mag, 23 - kMan) + splat_i((127 - kBias) << 23));
  const VecF subnormal = to_float(mag) * splat(std::ldexp(1.0f, 1 - kBias - kMan));
  VecF v = select(cmp_le_i(mag, splat_i((1 << kMan) - 1)), subnormal, normal);
  v = select(cmp_le_i(splat_i(kNanFrom), mag), splat(std::nanf("")), v);
  if constexpr (kInf > 0)
    v = select(cmp_le_i(mag, splat_i(kInf)) & cmp_le_i(splat_i(kInf), mag),
               splat(std::numeric_limits<float>::infinity()), v);
  return xor_bits(v, shift_left(b & splat_i(0x80), 24));
}

inline VecF load(const fp8_e4m3* p) {
  return widen_fp8<3, 7, 0x7f, 0>(load_u8(reinterpret_cast<const uint8_t*>(p)));
}
inline VecF load(const fp8_e5m2* p) {
  return widen_fp8<2, 15, 0x7d, 0x7c>(load_u8(reinterpret_cast<const uint8_t*>(p)));
}
template <typename T>
[[gnu::noinline]] VecF load_fp8_tail(const T* p, int n) {
  T buf[kLanes] = {};
  if (n > 0) std::memcpy(buf, p, static_cast<size_t>(n));
  return load(buf);
}
inline VecF load(const fp8_e4m3* p, int n) { return n >= kLanes ? load(p) : load_fp8_tail(p, n); }
inline VecF load(const fp8_e5m2* p, int n) { return n >= kLanes ? load(p) : load_fp8_tail(p, n); }

TESSERA_TARGET_END
