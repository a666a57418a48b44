// Element types and the 16-bit floating-point storage formats.
//
// Shape vocabulary used in every comment across the project (one fixed set of letters):
//   B batch (micro-batch size), T sequence length, C hidden size, NH query heads,
//   HD head dim (C / NH), KV key/value groups (query groups), F ffn hidden size,
//   V (padded) vocabulary, L layers, N = B*T tokens.
// Tensors are row-major; a comment like `inp (B,T,C)` gives the logical shape.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tessera {

enum class DType { kF32, kBF16, kF16, kI32, kI64, kU16 };

// Size of one element in bytes.
size_t dtype_size(DType dtype);
// "fp32", "bf16", "fp16", "int32", "int64", "uint16".
const char* dtype_name(DType dtype);

// bfloat16 storage: the upper 16 bits of an IEEE fp32. Arithmetic is always done in fp32;
// this type only stores. Conversion from fp32 rounds to nearest even (NaN stays NaN).
struct bf16 {
  uint16_t bits;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return to_float(bits); }

  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  static float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// IEEE half-precision storage (fp16). Conversion from fp32 rounds to nearest even; overflow
// gives inf; NaN stays NaN with the quiet bit set and the top mantissa bits kept, both ways (as
// the F16C instructions do). Portable bit arithmetic, bit for bit the same as the vector kernels'
// conversions on every target (kernels/simd/vec_generic.h; tested against F16C).
struct fp16 {
  uint16_t bits;
  fp16() = default;
  explicit fp16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return to_float(bits); }

  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint32_t h;
    if (u >= 0x47800000u) {  // >= 65536 (inf after rounding), inf, NaN
      h = u > 0x7f800000u ? 0x7e00u | ((u >> 13) & 0x3ffu) : 0x7c00u;
    } else if (u < 0x38800000u) {  // half subnormal or zero: the FPU rounds at the right bit
      float g;
      std::memcpy(&g, &u, 4);
      g += 0.5f;
      std::memcpy(&h, &g, 4);
      h -= 0x3f000000u;
    } else {  // normal: rebias the exponent, round to nearest even on the 13 dropped bits
      h = (u + ((15u - 127u) << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
    }
    return static_cast<uint16_t>(h | (sign >> 16));
  }
  static float to_float(uint16_t b) {
    uint32_t o = (static_cast<uint32_t>(b) & 0x7fffu) << 13;
    const uint32_t exp = b & 0x7c00u;
    o += (127u - 15u) << 23;
    float f;
    if (exp == 0x7c00u) {  // inf / NaN; a NaN comes out quiet, as F16C's vcvtph2ps makes it
      o += (128u - 16u) << 23;
      if (b & 0x3ffu) o |= 0x400000u;
      std::memcpy(&f, &o, 4);
    } else if (exp == 0) {  // zero / subnormal: renormalise through the FPU
      o += 1u << 23;
      std::memcpy(&f, &o, 4);
      f -= 6.103515625e-05f;  // 2^-14
    } else {
      std::memcpy(&f, &o, 4);
    }
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u |= (static_cast<uint32_t>(b) & 0x8000u) << 16;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// Load/store helpers so templated kernels read any storage type as fp32.
inline float to_f32(float x) { return x; }
inline float to_f32(bf16 x) { return bf16::to_float(x.bits); }
inline float to_f32(fp16 x) { return static_cast<float>(x); }
template <typename T>
inline T from_f32(float x);
template <>
inline float from_f32<float>(float x) { return x; }
template <>
inline bf16 from_f32<bf16>(float x) { return bf16(x); }
template <>
inline fp16 from_f32<fp16>(float x) { return fp16(x); }

// The DType tag of a storage type, for templated code that allocates tensors.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::kF32; }
template <>
constexpr DType dtype_of<bf16>() { return DType::kBF16; }
template <>
constexpr DType dtype_of<fp16>() { return DType::kF16; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <>
constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <>
constexpr DType dtype_of<uint16_t>() { return DType::kU16; }

// Calls f(T{}) with T the storage type of a compute dtype (float, bf16 or fp16), the types
// every kernel is instantiated for:
//   visit_float(t.dtype(), [&](auto tag) { using T = decltype(tag); ... });
template <typename F>
decltype(auto) visit_float(DType dtype, F&& f) {
  if (dtype == DType::kBF16) return f(bf16{});
  if (dtype == DType::kF16) return f(fp16{});
  if (dtype != DType::kF32) throw std::logic_error(std::string("no kernels for ") + dtype_name(dtype));
  return f(float{});
}

// Bulk conversions (portable loops, compiled for the baseline; the kernels convert on the fly
// with their own target's instructions); n elements, no aliasing between src and dst.
void convert(float* dst, const bf16* src, int64_t n);
void convert(bf16* dst, const float* src, int64_t n);
void convert(float* dst, const fp16* src, int64_t n);
void convert(fp16* dst, const float* src, int64_t n);

}  // namespace tessera
