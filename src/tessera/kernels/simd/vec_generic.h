// The portable vector layer: 16 fp32 lanes written with GCC/Clang vector extensions, which the
// compiler lowers to whatever the architecture's baseline has (SSE2 on x86-64, NEON on arm64).
//
// This file is the reference semantics of the vector layer (simd/vec.h): vec_avx2.h and
// vec_avx512.h implement the same functions with intrinsics, and the tests compare every
// kernel on every target against this one. Where a target may legitimately differ in the last
// bit it says so (fmadd: one rounding with FMA hardware, two here on x86-64 baseline).
//
// Included by simd/vec.h inside the target region; do not include directly.

#include <cstdint>
#include <cstring>

#include "tessera/core/dtype.h"

TESSERA_TARGET_BEGIN

typedef float F32x16 __attribute__((vector_size(64)));
typedef int32_t I32x16 __attribute__((vector_size(64)));
typedef uint32_t U32x16 __attribute__((vector_size(64)));
typedef uint16_t U16x16 __attribute__((vector_size(32)));
typedef double F64x16 __attribute__((vector_size(128)));
typedef uint64_t U64x16 __attribute__((vector_size(128)));

constexpr int kLanes = 16;
// Register blocking of the attention tile product (kernels/attention.cc): rows of A times
// 16-lane vectors of B held as accumulators. Baseline x86-64 has 16 128-bit registers, so a
// 16-lane vector takes four of them.
constexpr int kTileRows = 2;
constexpr int kTileVecs = 1;
// Blocking of the GEMM micro-kernel (kernels/gemm_packed.cc), as the tile product's.
constexpr int kGemmRows = 2;
constexpr int kGemmVecs = 1;
// No lookup16 here (it would be a lane-by-lane loop).
constexpr bool kFastLookup16 = false;
constexpr bool kUnpack6x64 = false;  // no unpack6x64 (AVX512_VBMI's byte permutes only)
#define TESSERA_VBMI                 // (so code naming it compiles; nothing calls it here)

struct VecF {
  F32x16 v;
};
struct VecI {  // 16 32-bit integer lanes (signed or unsigned by operation)
  I32x16 v;
};
struct VecD {  // 16 fp64 lanes
  F64x16 v;
};
struct Mask {  // per lane: all ones (set) or zero
  I32x16 v;
};

// Bit casts between vector types (GCC/Clang vector casts reinterpret, they do not convert).
inline F32x16 as_f32(I32x16 x) { return (F32x16)x; }
inline I32x16 as_i32(F32x16 x) { return (I32x16)x; }

// ---- construction ---------------------------------------------------------------------------
inline VecF zero() { return VecF{F32x16{} }; }
// Every lane x, bit for bit (-0.0 stays -0.0: adding it to a zero vector would not).
inline VecF splat(float x) { return VecF{F32x16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}}; }
inline VecI splat_i(int32_t x) { return VecI{I32x16{} + x}; }
inline VecI iota_i() { return VecI{I32x16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}; }

// ---- fp16 <-> fp32 on 16 lanes, bit for bit as fp16 in core/dtype.h ---------------------------
inline F32x16 half_to_float(U32x16 h) {
  const U32x16 exp_mask = U32x16{} + 0x7c00u;
  U32x16 o = (h & 0x7fffu) << 13;
  const U32x16 e = h & exp_mask;
  o += (127u - 15u) << 23;
  const I32x16 is_special = reinterpret_cast<I32x16>(e == exp_mask);   // inf / NaN
  const I32x16 is_small = reinterpret_cast<I32x16>(e == U32x16{});   // zero / subnormal
  o += reinterpret_cast<U32x16>(is_special) & ((128u - 16u) << 23);
  // A NaN comes out quiet (as F16C's vcvtph2ps makes it).
  const I32x16 is_nan = is_special & reinterpret_cast<I32x16>((h & 0x3ffu) != 0u);
  o |= reinterpret_cast<U32x16>(is_nan) & 0x400000u;
  // Subnormal: renormalise by letting the FPU subtract the implicit bias.
  const F32x16 renorm = as_f32(reinterpret_cast<I32x16>(o + (1u << 23))) - as_f32(I32x16{} + (113 << 23));
  o = reinterpret_cast<U32x16>((is_small & as_i32(renorm)) | (~is_small & reinterpret_cast<I32x16>(o)));
  o |= (h & 0x8000u) << 16;
  return as_f32(reinterpret_cast<I32x16>(o));
}

inline U32x16 float_to_half(F32x16 x) {
  U32x16 f = reinterpret_cast<U32x16>(as_i32(x));
  const U32x16 sign = f & 0x80000000u;
  f ^= sign;
  // Overflow (>= 65536 after rounding reaches inf anyway) / inf / NaN.
  const I32x16 big = reinterpret_cast<I32x16>(f >= 0x47800000u);
  const I32x16 nan = reinterpret_cast<I32x16>(f > 0x7f800000u);
  const U32x16 big_result = (reinterpret_cast<U32x16>(nan) & (0x7e00u | ((f >> 13) & 0x3ffu))) |
                            (reinterpret_cast<U32x16>(~nan) & 0x7c00u);
  // Subnormal results: adding 0.5 lets the FPU round to nearest even at the right bit.
  const I32x16 small = reinterpret_cast<I32x16>(f < 0x38800000u);
  const U32x16 small_result =
      reinterpret_cast<U32x16>(as_i32(as_f32(reinterpret_cast<I32x16>(f)) + 0.5f)) - 0x3f000000u;
  // Normal results: rebias the exponent and round to nearest even on the 13 dropped bits.
  const U32x16 odd = (f >> 13) & 1u;
  const U32x16 normal_result = (f + ((15u - 127u) << 23) + 0xfffu + odd) >> 13;
  const U32x16 r = (reinterpret_cast<U32x16>(big) & big_result) |
                   (reinterpret_cast<U32x16>(~big & small) & small_result) |
                   (reinterpret_cast<U32x16>(~big & ~small) & normal_result);
  return r | (sign >> 16);
}

// bf16 rounding of 16 lanes, bit for bit as bf16::from_float.
inline U32x16 float_to_bf16(F32x16 x) {
  const U32x16 u = reinterpret_cast<U32x16>(as_i32(x));
  // All ones where |x| > inf as integers (NaN), from the sign of inf - |x| (both below 2^31): GCC
  // 12 lowers this 16-lane integer compare to scalar code on the x86-64 baseline (3x slower bf16
  // stores), an arithmetic shift it keeps in SSE2 registers.
  const I32x16 nan = (0x7f800000 - reinterpret_cast<I32x16>(u & 0x7fffffffu)) >> 31;
  const U32x16 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const U32x16 quiet = (u >> 16) | 0x40u;
  return (reinterpret_cast<U32x16>(nan) & quiet) | (reinterpret_cast<U32x16>(~nan) & rounded);
}

// ---- loads: widen to fp32; the counted forms read lanes [0, n) only and zero the rest -------
inline VecF load(const float* p) {
  F32x16 v;
  std::memcpy(&v, p, sizeof v);
  return VecF{v};
}
// p[0] widened to fp32 (exactly) and broadcast; p[1] must be readable too: the intrinsic
// versions load both as one 32-bit word and shift. A GEMM micro-kernel reads a bf16 operand in
// place with it (kernels/gemm_packed.cc).
inline VecF splat_bf16(const bf16* p) { return splat(static_cast<float>(p[0])); }
inline VecF load(const bf16* p) {
  U16x16 h;
  std::memcpy(&h, p, sizeof h);
  return VecF{as_f32(reinterpret_cast<I32x16>(__builtin_convertvector(h, U32x16) << 16))};
}
inline VecF load(const fp16* p) {
  U16x16 h;
  std::memcpy(&h, p, sizeof h);
  return VecF{half_to_float(__builtin_convertvector(h, U32x16))};
}
// Lanes [0, n) of 16 int32 (n clamped to [0, 16]), the others 0.
inline VecI load_i(const int32_t* p, int n) {
  int32_t buf[kLanes] = {};
  if (n > 0) std::memcpy(buf, p, sizeof(int32_t) * (n < kLanes ? n : kLanes));
  I32x16 v;
  std::memcpy(&v, buf, sizeof v);
  return VecI{v};
}

// ---- stores: round to nearest even for 16-bit types -----------------------------------------
inline void store(float* p, VecF x) { std::memcpy(p, &x.v, sizeof x.v); }
inline void store(bf16* p, VecF x) {
  const U16x16 h = __builtin_convertvector(float_to_bf16(x.v), U16x16);
  std::memcpy(p, &h, sizeof h);
}
inline void store(fp16* p, VecF x) {
  const U16x16 h = __builtin_convertvector(float_to_half(x.v), U16x16);
  std::memcpy(p, &h, sizeof h);
}
// Counted loads and stores of every type (n clamped to [0, 16]).
#include "tessera/kernels/simd/vec_tail.inc"

// ---- arithmetic ----------------------------------------------------------------------------
inline VecF operator+(VecF a, VecF b) { return VecF{a.v + b.v}; }
inline VecF operator-(VecF a, VecF b) { return VecF{a.v - b.v}; }
inline VecF operator*(VecF a, VecF b) { return VecF{a.v * b.v}; }
inline VecF operator/(VecF a, VecF b) { return VecF{a.v / b.v}; }
// a * b + c and c - a * b. Fused (one rounding) where the architecture's baseline has FMA
// (arm64); two roundings on x86-64 baseline, which has none.
inline VecF fmadd(VecF a, VecF b, VecF c) {
#if defined(__FP_FAST_FMAF)
  F32x16 r;
  for (int i = 0; i < kLanes; ++i) r[i] = __builtin_fmaf(a.v[i], b.v[i], c.v[i]);
  return VecF{r};
#else
  return VecF{a.v * b.v + c.v};
#endif
}
inline VecF fnmadd(VecF a, VecF b, VecF c) { return fmadd(VecF{-a.v}, b, c); }
// x86 semantics: the second operand when either is NaN (so max(m, NaN) = NaN, max(NaN, m) = m).
inline VecF max(VecF a, VecF b) {
  const I32x16 gt = reinterpret_cast<I32x16>(a.v > b.v);
  return VecF{as_f32((gt & as_i32(a.v)) | (~gt & as_i32(b.v)))};
}
inline VecF min(VecF a, VecF b) {
  const I32x16 lt = reinterpret_cast<I32x16>(a.v < b.v);
  return VecF{as_f32((lt & as_i32(a.v)) | (~lt & as_i32(b.v)))};
}
inline VecF abs(VecF a) { return VecF{as_f32(as_i32(a.v) & 0x7fffffff)}; }
inline VecF sqrt(VecF a) {
  F32x16 r;
  for (int i = 0; i < kLanes; ++i) r[i] = __builtin_sqrtf(a.v[i]);
  return VecF{r};
}
// Rounds to the nearest integer, ties to even; |x| < 2^22 (as the callers guarantee).
inline VecF round_small(VecF x) {
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it leaves the integer part in the mantissa
  return VecF{(x.v + magic) - magic};
}
// p * 2^k for integral k in [-150, 129] with a single rounding: 2^k is applied in two halves,
// each a normal power of two, and the first product is exact (|p| within [0.5, 2]).
inline VecF scale_pow2(VecF p, VecF k) {
  const I32x16 ki = __builtin_convertvector(k.v, I32x16);
  const I32x16 k1 = ki / 2, k2 = ki - k1;
  return VecF{p.v * as_f32((k1 + 127) << 23) * as_f32((k2 + 127) << 23)};
}

// Sum of the lanes in a fixed tree: (i, i + 8), then (i, i + 4), (i, i + 2), (0, 1); the same
// order as _mm512_reduce_add_ps, so every target reduces identically.
template <typename S, typename V>
inline S tree_sum(const V& v) {
  S s[8];
  for (int i = 0; i < 8; ++i) s[i] = v[i] + v[i + 8];
  for (int i = 0; i < 4; ++i) s[i] = s[i] + s[i + 4];
  for (int i = 0; i < 2; ++i) s[i] = s[i] + s[i + 2];
  return s[0] + s[1];
}
inline float reduce_add(VecF a) { return tree_sum<float>(a.v); }
inline float reduce_max(VecF a) {
  VecF m = a;
  for (int w = 8; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) m.v[i] = m.v[i] > m.v[i + w] ? m.v[i] : m.v[i + w];
  return m.v[0];
}

// ---- masks ---------------------------------------------------------------------------------
// Lanes [0, n); n may be <= 0 (none) or >= 16 (all).
inline Mask first_n(int n) { return Mask{reinterpret_cast<I32x16>(iota_i().v < n)}; }
// Lane l is set iff bit l of `bits` is.
inline Mask from_bits(uint32_t bits) {
  const I32x16 b = (I32x16{} + static_cast<int32_t>(bits)) >> iota_i().v;
  return Mask{-(b & 1)};
}
inline uint32_t to_bits(Mask m) {
  uint32_t bits = 0;
  for (int i = 0; i < kLanes; ++i) bits |= static_cast<uint32_t>(m.v[i] & 1) << i;
  return bits;
}
inline Mask operator&(Mask a, Mask b) { return Mask{a.v & b.v}; }
inline Mask operator|(Mask a, Mask b) { return Mask{a.v | b.v}; }
inline bool any(Mask m) { return to_bits(m) != 0; }
// Ordered comparisons: false where either lane is NaN.
inline Mask cmp_ge(VecF a, VecF b) { return Mask{reinterpret_cast<I32x16>(a.v >= b.v)}; }
inline Mask cmp_lt(VecF a, VecF b) { return Mask{reinterpret_cast<I32x16>(a.v < b.v)}; }
inline Mask cmp_neq(VecF a, VecF b) {
  return Mask{reinterpret_cast<I32x16>(a.v < b.v) | reinterpret_cast<I32x16>(a.v > b.v)};
}
// Infinity or NaN.
inline Mask non_finite(VecF a) {
  // e - inf is 0 for inf / NaN and negative otherwise: its sign, not a compare (see
  // float_to_bf16).
  const I32x16 e = as_i32(a.v) & 0x7f800000;
  return Mask{~((e - 0x7f800000) >> 31)};
}
inline Mask cmp_le_i(VecI a, VecI b) { return Mask{reinterpret_cast<I32x16>(a.v <= b.v)}; }
// m ? a : b per lane, and m ? a : 0.
inline VecF select(Mask m, VecF a, VecF b) {
  return VecF{as_f32((m.v & as_i32(a.v)) | (~m.v & as_i32(b.v)))};
}
inline VecF zero_unless(Mask m, VecF a) { return VecF{as_f32(m.v & as_i32(a.v))}; }

// ---- 32-bit integer lanes (Philox, document masks) ------------------------------------------
inline VecI operator+(VecI a, VecI b) { return VecI{a.v + b.v}; }
inline VecI operator^(VecI a, VecI b) { return VecI{a.v ^ b.v}; }
inline VecI shift_right(VecI a, int bits) {
  return VecI{reinterpret_cast<I32x16>(reinterpret_cast<U32x16>(a.v) >> bits)};
}
// The full 64-bit products of unsigned 32-bit lanes, as high and low halves.
inline void mul_wide_u32(VecI a, VecI b, VecI* hi, VecI* lo) {
  const U64x16 p = __builtin_convertvector(reinterpret_cast<U32x16>(a.v), U64x16) *
                   __builtin_convertvector(reinterpret_cast<U32x16>(b.v), U64x16);
  *hi = VecI{reinterpret_cast<I32x16>(__builtin_convertvector(p >> 32, U32x16))};
  *lo = VecI{reinterpret_cast<I32x16>(__builtin_convertvector(p, U32x16))};
}
// Signed integers to fp32 (exact below 2^24).
inline VecF to_float(VecI a) { return VecF{__builtin_convertvector(a.v, F32x16)}; }

// ---- narrow codes (weight-only quantization, kernels/quantized_gemv.cc) ---------------------
// Whole blocks only: each reads exactly the bytes of its 16 lanes.
// 16 signed bytes, each widened to fp32 exactly.
inline VecF load(const int8_t* p) {
  I32x16 v;
  for (int i = 0; i < kLanes; ++i) v[i] = p[i];
  return VecF{__builtin_convertvector(v, F32x16)};
}
// 16 unsigned bytes, each zero-extended into a 32-bit lane.
inline VecI load_u8(const uint8_t* p) {
  I32x16 v;
  for (int i = 0; i < kLanes; ++i) v[i] = p[i];
  return VecI{v};
}
// 16 6-bit fields packed most significant bit first in 12 bytes (4 fields in each 3 bytes:
// b0 = f0 << 2 | f1 >> 4, b1 = (f1 & 15) << 4 | f2 >> 2, b2 = (f2 & 3) << 6 | f3), field k in
// the top 6 bits of lane k (bits 26-31; the bits below are unspecified). unpack6_top may read the
// 4 bytes after the 12 (the caller makes sure they are readable); unpack6_top_exact reads only
// the 12.
inline VecI unpack6_top_exact(const uint8_t* p) {
  I32x16 v;
  for (int g = 0; g < 4; ++g, p += 3) {
    const uint32_t bits = uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2];
    for (int k = 0; k < 4; ++k) v[4 * g + k] = static_cast<int32_t>(bits << (8 + 6 * k));
  }
  return VecI{v};
}
inline VecI unpack6_top(const uint8_t* p) { return unpack6_top_exact(p); }
// table[idx & 31] per lane, from a 32-entry table.
inline VecF lookup32(const float* table, VecI idx) {
  F32x16 v;
  for (int i = 0; i < kLanes; ++i) v[i] = table[idx.v[i] & 31];
  return VecF{v};
}
inline VecI operator&(VecI a, VecI b) { return VecI{a.v & b.v}; }
inline VecI shift_left(VecI a, int bits) {
  return VecI{reinterpret_cast<I32x16>(reinterpret_cast<U32x16>(a.v) << bits)};
}
// The bits of a xor b per lane (b = 1 << 31 flips a lane's sign).
inline VecF xor_bits(VecF a, VecI b) { return VecF{as_f32(as_i32(a.v) ^ b.v)}; }
// The lanes' bits as fp32 (no conversion).
inline VecF bits_to_float(VecI a) { return VecF{as_f32(a.v)}; }
// out[k] lane j = in[j % 4] lane 4 k + j / 4: four word streams into element order.
inline void interleave4(const VecI in[4], VecI out[4]) {
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < kLanes; ++j) out[k].v[j] = in[j % 4].v[4 * k + j / 4];
}

// ---- fp64 accumulation ---------------------------------------------------------------------
inline VecD zero_d() { return VecD{F64x16{}}; }
// acc + x^2 in fp64 (each square of an fp32 is exact in fp64, so no rounding differs by target).
inline VecD add_squares(VecD acc, VecF x) {
  const F64x16 d = __builtin_convertvector(x.v, F64x16);
  return VecD{acc.v + d * d};
}
inline VecD operator+(VecD a, VecD b) { return VecD{a.v + b.v}; }
// Lanes (i, i + 8) first, then a tree as reduce_add.
inline double reduce_add(VecD a) { return tree_sum<double>(a.v); }

// ---- layout --------------------------------------------------------------------------------
// Transposes 16 vectors of 16 lanes: x[r] lane c becomes x[c] lane r.
inline void transpose16(VecF (&x)[16]) {
  float t[16][16];
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) t[c][r] = x[r].v[c];
  for (int r = 0; r < 16; ++r) std::memcpy(&x[r].v, t[r], sizeof x[r].v);
}
inline void prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

TESSERA_TARGET_END
