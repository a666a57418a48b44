// The portable vector layer: 16 fp32 lanes written with GCC vector extensions, which the
// compiler lowers to whatever the architecture's baseline has (SSE2 on x86-64, NEON on arm64).
// The lanes are held as 16-byte vectors (simd/lanes16.h: four for fp32 lanes), the width of
// those registers; the one intrinsic is arm64's fused multiply-add (fmadd below).
//
// This file is the reference semantics of the vector layer (simd/vec.h): vec_avx2.h and
// vec_avx512.h implement the same functions with intrinsics, and the tests compare every
// kernel on every target against this one. Where a target may legitimately differ in the last
// bit it says so (fmadd: one rounding with FMA hardware, two here on x86-64 baseline).
//
// Included by simd/vec.h; do not include directly.

#include <cstdint>
#include <cstring>

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "tessera/core/dtype.h"
#include "tessera/kernels/simd/lanes16.h"

TESSERA_TARGET_BEGIN

// 16 lanes each, held as native-width parts (simd/lanes16.h: so they live in registers).
using F32x16 = Lanes16<float>;
using I32x16 = Lanes16<int32_t>;
using U32x16 = Lanes16<uint32_t>;
using U16x16 = Lanes16<uint16_t>;
using F64x16 = Lanes16<double>;
using U64x16 = Lanes16<uint64_t>;

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

// Bit casts between fp32 and int32 lanes.
TESSERA_LANES_INLINE F32x16 as_f32(I32x16 x) { return bitcast<F32x16>(x); }
TESSERA_LANES_INLINE I32x16 as_i32(F32x16 x) { return bitcast<I32x16>(x); }

// ---- construction ---------------------------------------------------------------------------
TESSERA_LANES_INLINE VecF zero() { return VecF{F32x16{}}; }
// Every lane x, bit for bit (-0.0 stays -0.0: adding it to a zero vector would not).
TESSERA_LANES_INLINE VecF splat(float x) { return VecF{broadcast(x)}; }
TESSERA_LANES_INLINE VecI splat_i(int32_t x) { return VecI{broadcast(x)}; }
TESSERA_LANES_INLINE VecI iota_i() {
  I32x16 v{};
  for (int i = 0; i < kLanes; ++i) v.set(i, i);
  return VecI{v};
}

// ---- fp16 <-> fp32 on 16 lanes, bit for bit as fp16 in core/dtype.h ---------------------------
TESSERA_LANES_INLINE F32x16 half_to_float(U32x16 h) {
  const U32x16 exp_mask = U32x16{} + 0x7c00u;
  U32x16 o = (h & 0x7fffu) << 13;
  const U32x16 e = h & exp_mask;
  o += (127u - 15u) << 23;
  const I32x16 is_special = bitcast<I32x16>(e == exp_mask);  // inf / NaN
  const I32x16 is_small = bitcast<I32x16>(e == U32x16{});    // zero / subnormal
  o += bitcast<U32x16>(is_special) & ((128u - 16u) << 23);
  // A NaN comes out quiet (as F16C's vcvtph2ps makes it).
  const I32x16 is_nan = is_special & bitcast<I32x16>((h & 0x3ffu) != 0u);
  o |= bitcast<U32x16>(is_nan) & 0x400000u;
  // Subnormal: renormalise by letting the FPU subtract the implicit bias.
  const F32x16 renorm = as_f32(bitcast<I32x16>(o + (1u << 23))) - as_f32(I32x16{} + (113 << 23));
  o = bitcast<U32x16>((is_small & as_i32(renorm)) | (~is_small & bitcast<I32x16>(o)));
  o |= (h & 0x8000u) << 16;
  return as_f32(bitcast<I32x16>(o));
}

TESSERA_LANES_INLINE U32x16 float_to_half(F32x16 x) {
  U32x16 f = bitcast<U32x16>(as_i32(x));
  const U32x16 sign = f & 0x80000000u;
  f ^= sign;
  // Overflow (>= 65536 after rounding reaches inf anyway) / inf / NaN.
  const I32x16 big = bitcast<I32x16>(f >= 0x47800000u);
  const I32x16 nan = bitcast<I32x16>(f > 0x7f800000u);
  const U32x16 big_result =
      (bitcast<U32x16>(nan) & (0x7e00u | ((f >> 13) & 0x3ffu))) | (bitcast<U32x16>(~nan) & 0x7c00u);
  // Subnormal results: adding 0.5 lets the FPU round to nearest even at the right bit.
  const I32x16 small = bitcast<I32x16>(f < 0x38800000u);
  const U32x16 small_result =
      bitcast<U32x16>(as_i32(as_f32(bitcast<I32x16>(f)) + 0.5f)) - 0x3f000000u;
  // Normal results: rebias the exponent and round to nearest even on the 13 dropped bits.
  const U32x16 odd = (f >> 13) & 1u;
  const U32x16 normal_result = (f + ((15u - 127u) << 23) + 0xfffu + odd) >> 13;
  const U32x16 r = (bitcast<U32x16>(big) & big_result) |
                   (bitcast<U32x16>(~big & small) & small_result) |
                   (bitcast<U32x16>(~big & ~small) & normal_result);
  return r | (sign >> 16);
}

// bf16 rounding of 16 lanes, bit for bit as bf16::from_float, each result in the high half of
// its 32-bit lane (the low half unspecified): u + 0x7fff + (bit 16 of u), or u's top bits with
// the quiet bit set for NaN.
TESSERA_LANES_INLINE U32x16 round_to_bf16_high(F32x16 x) {
  const U32x16 u = bitcast<U32x16>(x);
  const U32x16 rounded = u + 0x7fffu + ((u >> 16) & 1u);
  // NaN is rare: one test of all lanes, then the select only if needed (the select cost as much
  // as the rounding; bench/pointwise_bench, baseline). An integer compare, not x != x, which
  // -ffinite-math-only would fold away.
  const I32x16 nan = bitcast<I32x16>(u & 0x7fffffffu) > 0x7f800000;
  if (__builtin_expect(!any_set(nan), 1)) return rounded;
  return (bitcast<U32x16>(nan) & (u | 0x400000u)) | (bitcast<U32x16>(~nan) & rounded);
}

// ---- loads: widen to fp32; the counted forms read lanes [0, n) only and zero the rest -------
TESSERA_LANES_INLINE VecF load(const float* p) { return VecF{load_lanes(p)}; }
// p[0] widened to fp32 (exactly) and broadcast; p[1] must be readable too: the intrinsic
// versions load both as one 32-bit word and shift. A GEMM micro-kernel reads a bf16 operand in
// place with it (kernels/gemm_packed.cc).
TESSERA_LANES_INLINE VecF splat_bf16(const bf16* p) { return splat(static_cast<float>(p[0])); }
TESSERA_LANES_INLINE VecF load(const bf16* p) {
  return VecF{bitcast<F32x16>(
      widen<U32x16, Half::kHigh>(load_lanes(reinterpret_cast<const uint16_t*>(p))))};
}
TESSERA_LANES_INLINE VecF load(const fp16* p) {
  return VecF{half_to_float(widen<U32x16>(load_lanes(reinterpret_cast<const uint16_t*>(p))))};
}
// Lanes [0, n) of 16 int32 (n clamped to [0, 16]), the others 0.
TESSERA_LANES_INLINE VecI load_i(const int32_t* p, int n) {
  int32_t buf[kLanes] = {};
  if (n > 0) std::memcpy(buf, p, sizeof(int32_t) * (n < kLanes ? n : kLanes));
  return VecI{load_lanes(buf)};
}

// ---- stores: round to nearest even for 16-bit types -----------------------------------------
TESSERA_LANES_INLINE void store(float* p, VecF x) { store_lanes(p, x.v); }
TESSERA_LANES_INLINE void store(bf16* p, VecF x) {
  store_lanes(reinterpret_cast<uint16_t*>(p), narrow<U16x16, Half::kHigh>(round_to_bf16_high(x.v)));
}
TESSERA_LANES_INLINE void store(fp16* p, VecF x) {
  store_lanes(reinterpret_cast<uint16_t*>(p), narrow<U16x16>(float_to_half(x.v)));
}
// Counted loads and stores of every type (n clamped to [0, 16]).
#include "tessera/kernels/simd/vec_tail.inc"

// ---- arithmetic ----------------------------------------------------------------------------
TESSERA_LANES_INLINE VecF operator+(VecF a, VecF b) { return VecF{a.v + b.v}; }
TESSERA_LANES_INLINE VecF operator-(VecF a, VecF b) { return VecF{a.v - b.v}; }
TESSERA_LANES_INLINE VecF operator*(VecF a, VecF b) { return VecF{a.v * b.v}; }
TESSERA_LANES_INLINE VecF operator/(VecF a, VecF b) { return VecF{a.v / b.v}; }
// a * b + c and c - a * b. Fused (one rounding) where the architecture's baseline has FMA
// (arm64); two roundings on x86-64 baseline, which has none.
TESSERA_LANES_INLINE VecF fmadd(VecF a, VecF b, VecF c) {
#if defined(__FP_FAST_FMAF)
  F32x16 r;
#pragma GCC unroll 4
  for (int i = 0; i < F32x16::kParts; ++i) {
#if defined(__aarch64__)
    // One fmla per part: GCC left __builtin_fmaf on single lanes scalar where no surrounding
    // loop got vectorized.
    using N = float32x4_t;
    r.p[i] = reinterpret_cast<F32x16::Part>(vfmaq_f32(reinterpret_cast<N>(c.v.p[i]),
                                                      reinterpret_cast<N>(a.v.p[i]),
                                                      reinterpret_cast<N>(b.v.p[i])));
#else
#pragma GCC unroll 4
    for (int j = 0; j < F32x16::kPer; ++j)
      r.p[i][j] = __builtin_fmaf(a.v.p[i][j], b.v.p[i][j], c.v.p[i][j]);
#endif
  }
  return VecF{r};
#else
  return VecF{a.v * b.v + c.v};
#endif
}
TESSERA_LANES_INLINE VecF fnmadd(VecF a, VecF b, VecF c) { return fmadd(VecF{-a.v}, b, c); }
// x86 semantics: the second operand when either is NaN (so max(m, NaN) = NaN, max(NaN, m) = m).
TESSERA_LANES_INLINE VecF max(VecF a, VecF b) {
  const I32x16 gt = bitcast<I32x16>(a.v > b.v);
  return VecF{as_f32((gt & as_i32(a.v)) | (~gt & as_i32(b.v)))};
}
TESSERA_LANES_INLINE VecF min(VecF a, VecF b) {
  const I32x16 lt = bitcast<I32x16>(a.v < b.v);
  return VecF{as_f32((lt & as_i32(a.v)) | (~lt & as_i32(b.v)))};
}
TESSERA_LANES_INLINE VecF abs(VecF a) { return VecF{as_f32(as_i32(a.v) & 0x7fffffff)}; }
TESSERA_LANES_INLINE VecF sqrt(VecF a) {
  F32x16 r;
  for (int i = 0; i < kLanes; ++i) r.set(i, __builtin_sqrtf(a.v[i]));
  return VecF{r};
}
// Rounds to the nearest integer, ties to even; |x| < 2^22 (as the callers guarantee).
TESSERA_LANES_INLINE VecF round_small(VecF x) {
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it leaves the integer part in the mantissa
  return VecF{(x.v + magic) - magic};
}
// p * 2^k for integral k in [-150, 129] with a single rounding: 2^k is applied in two halves,
// each a normal power of two, and the first product is exact (|p| within [0.5, 2]).
TESSERA_LANES_INLINE VecF scale_pow2(VecF p, VecF k) {
  const I32x16 ki = convert_lanes<I32x16>(k.v);
  const I32x16 k1 = ki / 2, k2 = ki - k1;
  return VecF{p.v * as_f32((k1 + 127) << 23) * as_f32((k2 + 127) << 23)};
}

// Sum of the lanes in a fixed tree: (i, i + 8), then (i, i + 4), (i, i + 2), (0, 1); the same
// order as _mm512_reduce_add_ps, so every target reduces identically.
template <typename S, typename V>
TESSERA_LANES_INLINE S tree_sum(const V& v) {
  S s[8];
  for (int i = 0; i < 8; ++i) s[i] = v[i] + v[i + 8];
  for (int i = 0; i < 4; ++i) s[i] = s[i] + s[i + 4];
  for (int i = 0; i < 2; ++i) s[i] = s[i] + s[i + 2];
  return s[0] + s[1];
}
TESSERA_LANES_INLINE float reduce_add(VecF a) { return tree_sum<float>(a.v); }
TESSERA_LANES_INLINE float reduce_max(VecF a) {
  VecF m = a;
  for (int w = 8; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) m.v.set(i, m.v[i] > m.v[i + w] ? m.v[i] : m.v[i + w]);
  return m.v[0];
}

// ---- masks ---------------------------------------------------------------------------------
// Lanes [0, n); n may be <= 0 (none) or >= 16 (all).
TESSERA_LANES_INLINE Mask first_n(int n) { return Mask{bitcast<I32x16>(iota_i().v < n)}; }
// Lane l is set iff bit l of `bits` is.
TESSERA_LANES_INLINE Mask from_bits(uint32_t bits) {
  const I32x16 b = (I32x16{} + static_cast<int32_t>(bits)) >> iota_i().v;
  return Mask{-(b & 1)};
}
TESSERA_LANES_INLINE uint32_t to_bits(Mask m) {
  uint32_t bits = 0;
  for (int i = 0; i < kLanes; ++i) bits |= static_cast<uint32_t>(m.v[i] & 1) << i;
  return bits;
}
TESSERA_LANES_INLINE Mask operator&(Mask a, Mask b) { return Mask{a.v & b.v}; }
TESSERA_LANES_INLINE Mask operator|(Mask a, Mask b) { return Mask{a.v | b.v}; }
TESSERA_LANES_INLINE bool any(Mask m) { return to_bits(m) != 0; }
// Ordered comparisons: false where either lane is NaN.
TESSERA_LANES_INLINE Mask cmp_ge(VecF a, VecF b) { return Mask{bitcast<I32x16>(a.v >= b.v)}; }
TESSERA_LANES_INLINE Mask cmp_lt(VecF a, VecF b) { return Mask{bitcast<I32x16>(a.v < b.v)}; }
TESSERA_LANES_INLINE Mask cmp_neq(VecF a, VecF b) {
  return Mask{bitcast<I32x16>(a.v < b.v) | bitcast<I32x16>(a.v > b.v)};
}
// Infinity or NaN.
TESSERA_LANES_INLINE Mask non_finite(VecF a) {
  // e - inf is 0 for inf / NaN and negative otherwise: its sign, an arithmetic shift SSE2 has
  // (GCC 12 lowered the equivalent 64-byte integer compare to scalar code there).
  const I32x16 e = as_i32(a.v) & 0x7f800000;
  return Mask{~((e - 0x7f800000) >> 31)};
}
TESSERA_LANES_INLINE Mask cmp_le_i(VecI a, VecI b) { return Mask{bitcast<I32x16>(a.v <= b.v)}; }
// m ? a : b per lane, and m ? a : 0.
TESSERA_LANES_INLINE VecF select(Mask m, VecF a, VecF b) {
  return VecF{as_f32((m.v & as_i32(a.v)) | (~m.v & as_i32(b.v)))};
}
TESSERA_LANES_INLINE VecF zero_unless(Mask m, VecF a) { return VecF{as_f32(m.v & as_i32(a.v))}; }

// ---- 32-bit integer lanes (Philox, document masks) ------------------------------------------
TESSERA_LANES_INLINE VecI operator+(VecI a, VecI b) { return VecI{a.v + b.v}; }
TESSERA_LANES_INLINE VecI operator^(VecI a, VecI b) { return VecI{a.v ^ b.v}; }
TESSERA_LANES_INLINE VecI shift_right(VecI a, int bits) {
  return VecI{bitcast<I32x16>(bitcast<U32x16>(a.v) >> bits)};
}
// The full 64-bit products of unsigned 32-bit lanes, as high and low halves.
TESSERA_LANES_INLINE void mul_wide_u32(VecI a, VecI b, VecI* hi, VecI* lo) {
  const U64x16 p = widen<U64x16>(bitcast<U32x16>(a.v)) * widen<U64x16>(bitcast<U32x16>(b.v));
  *hi = VecI{bitcast<I32x16>(narrow<U32x16>(p >> 32))};
  *lo = VecI{bitcast<I32x16>(narrow<U32x16>(p))};
}
// Signed integers to fp32 (exact below 2^24).
TESSERA_LANES_INLINE VecF to_float(VecI a) { return VecF{convert_lanes<F32x16>(a.v)}; }

// ---- narrow codes (weight-only quantization, kernels/quantized_gemv.cc) ---------------------
// Whole blocks only: each reads exactly the bytes of its 16 lanes.
// 16 signed bytes, each widened to fp32 exactly.
TESSERA_LANES_INLINE VecF load(const int8_t* p) {
  I32x16 v;
  for (int i = 0; i < kLanes; ++i) v.set(i, p[i]);
  return VecF{convert_lanes<F32x16>(v)};
}
// 16 unsigned bytes, each zero-extended into a 32-bit lane.
TESSERA_LANES_INLINE VecI load_u8(const uint8_t* p) {
  I32x16 v;
  for (int i = 0; i < kLanes; ++i) v.set(i, p[i]);
  return VecI{v};
}
// 16 6-bit fields packed most significant bit first in 12 bytes (4 fields in each 3 bytes:
// b0 = f0 << 2 | f1 >> 4, b1 = (f1 & 15) << 4 | f2 >> 2, b2 = (f2 & 3) << 6 | f3), field k in
// the top 6 bits of lane k (bits 26-31; the bits below are unspecified). unpack6_top may read the
// 4 bytes after the 12 (the caller makes sure they are readable); unpack6_top_exact reads only
// the 12.
TESSERA_LANES_INLINE VecI unpack6_top_exact(const uint8_t* p) {
  I32x16 v;
  for (int g = 0; g < 4; ++g, p += 3) {
    const uint32_t bits = uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2];
    for (int k = 0; k < 4; ++k) v.set(4 * g + k, static_cast<int32_t>(bits << (8 + 6 * k)));
  }
  return VecI{v};
}
TESSERA_LANES_INLINE VecI unpack6_top(const uint8_t* p) { return unpack6_top_exact(p); }
// table[idx & 31] per lane, from a 32-entry table.
TESSERA_LANES_INLINE VecF lookup32(const float* table, VecI idx) {
  F32x16 v;
  for (int i = 0; i < kLanes; ++i) v.set(i, table[idx.v[i] & 31]);
  return VecF{v};
}
TESSERA_LANES_INLINE VecI operator&(VecI a, VecI b) { return VecI{a.v & b.v}; }
TESSERA_LANES_INLINE VecI shift_left(VecI a, int bits) {
  return VecI{bitcast<I32x16>(bitcast<U32x16>(a.v) << bits)};
}
// The bits of a xor b per lane (b = 1 << 31 flips a lane's sign).
TESSERA_LANES_INLINE VecF xor_bits(VecF a, VecI b) { return VecF{as_f32(as_i32(a.v) ^ b.v)}; }
// The lanes' bits as fp32 (no conversion).
TESSERA_LANES_INLINE VecF bits_to_float(VecI a) { return VecF{as_f32(a.v)}; }
// out[k] lane j = in[j % 4] lane 4 k + j / 4: four word streams into element order.
TESSERA_LANES_INLINE void interleave4(const VecI in[4], VecI out[4]) {
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < kLanes; ++j) out[k].v.set(j, in[j % 4].v[4 * k + j / 4]);
}

// ---- fp64 accumulation ---------------------------------------------------------------------
TESSERA_LANES_INLINE VecD zero_d() { return VecD{F64x16{}}; }
// acc + x^2 in fp64 (each square of an fp32 is exact in fp64, so no rounding differs by target).
TESSERA_LANES_INLINE VecD add_squares(VecD acc, VecF x) {
  const F64x16 d = widen<F64x16>(x.v);
  return VecD{acc.v + d * d};
}
TESSERA_LANES_INLINE VecD operator+(VecD a, VecD b) { return VecD{a.v + b.v}; }
// Lanes (i, i + 8) first, then a tree as reduce_add.
TESSERA_LANES_INLINE double reduce_add(VecD a) { return tree_sum<double>(a.v); }

// ---- layout --------------------------------------------------------------------------------
// Transposes 16 vectors of 16 lanes: x[r] lane c becomes x[c] lane r.
TESSERA_LANES_INLINE void transpose16(VecF (&x)[16]) {
  float t[16][16];
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) t[c][r] = x[r].v[c];
  for (int r = 0; r < 16; ++r) x[r].v = load_lanes(t[r]);
}
TESSERA_LANES_INLINE void prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

TESSERA_TARGET_END
#undef TESSERA_LANES_INLINE
