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

#include <immintrin.h>

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

// IEEE half-precision storage (fp16). Conversions use the F16C instructions.
struct fp16 {
  uint16_t bits;
  fp16() = default;
  explicit fp16(float f) : bits(static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT))) {}
  explicit operator float() const { return _cvtsh_ss(bits); }
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

// Bulk conversions (vectorised); n elements, no aliasing between src and dst.
void convert(float* dst, const bf16* src, int64_t n);
void convert(bf16* dst, const float* src, int64_t n);
void convert(float* dst, const fp16* src, int64_t n);
void convert(fp16* dst, const float* src, int64_t n);

}  // namespace tessera
