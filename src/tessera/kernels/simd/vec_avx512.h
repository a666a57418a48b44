// The vector layer on AVX-512 (F, BW, VL, DQ): one zmm register per 16-lane vector, masks in
// k registers, masked loads and stores that touch no memory outside the mask. With
// TESSERA_TARGET_AVX512BF16 the bf16 stores use vcvtneps2bf16 (round to nearest even, as
// bf16::from_float, except that fp32 subnormals become signed zeros); otherwise they round
// with integer arithmetic, bit for bit as bf16::from_float.
//
// Same functions and contracts as vec_generic.h (the reference); included by simd/vec.h.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tessera/core/dtype.h"

TESSERA_TARGET_BEGIN

constexpr int kLanes = 16;
// 6 rows x 4 vectors = 24 accumulators + 4 B vectors + 1 broadcast of the 32 zmm registers.
constexpr int kTileRows = 6;
constexpr int kTileVecs = 4;
// Blocking of the GEMM micro-kernel (kernels/gemm_packed.cc): 12 rows x 2 vectors = 24
// accumulators + 2 B vectors + 1 broadcast of the 32 zmm (12 x 2, 8 x 3 and 6 x 4 measured
// within the noise of each other; 12 x 2 keeps the panel width a divisor of every model width).
constexpr int kGemmRows = 12;
constexpr int kGemmVecs = 2;
// lookup16 (below) exists, one instruction (only here: on other targets it would cost more than
// the arithmetic a 16-value lookup saves).
constexpr bool kFastLookup16 = true;

struct VecF {
  __m512 v;
};
struct VecI {
  __m512i v;
};
struct VecD {  // 16 fp64 lanes: lanes 0-7 in lo, 8-15 in hi
  __m512d lo, hi;
};
struct Mask {
  __mmask16 v;
};

// GCC 12's unmasked AVX-512 wrappers start from _mm512_undefined_*() and trip
// -Wmaybe-uninitialized (GCC bug 105593); the all-lanes masked forms compile to the same
// instructions without it.
constexpr __mmask16 kAll = 0xFFFF;
constexpr __mmask8 kAll8 = 0xFF;

inline VecF zero() { return VecF{_mm512_setzero_ps()}; }
inline VecF splat(float x) { return VecF{_mm512_set1_ps(x)}; }
inline VecI splat_i(int32_t x) { return VecI{_mm512_set1_epi32(x)}; }
inline VecI iota_i() {
  return VecI{_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)};
}
inline Mask first_n(int n) {
  return Mask{n >= 16 ? kAll : (n <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << n) - 1))};
}

// ---- loads ---------------------------------------------------------------------------------
inline VecF widen_bf16(__m256i h) {
  return VecF{_mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16))};
}
inline VecF load(const float* p) { return VecF{_mm512_loadu_ps(p)}; }
// splat_bf16 (contract in vec_generic.h): as in vec_avx2.h, a 32-bit broadcast load and a shift.
inline VecF splat_bf16(const bf16* p) {
  float pair;  // the two bf16's bits (memcpy: no aliasing of bf16 storage as float)
  std::memcpy(&pair, p, sizeof pair);
  const __m512i w = _mm512_castps_si512(_mm512_set1_ps(pair));
  return VecF{_mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, w, 16))};
}
inline VecF load(const bf16* p) {
  return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VecF load(const fp16* p) {
  return VecF{_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline VecF load(const float* p, int n) { return VecF{_mm512_maskz_loadu_ps(first_n(n).v, p)}; }
inline VecF load(const bf16* p, int n) {
  return widen_bf16(_mm256_maskz_loadu_epi16(first_n(n).v, p));
}
inline VecF load(const fp16* p, int n) {
  return VecF{_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first_n(n).v, p))};
}
inline VecI load_i(const int32_t* p, int n) {
  return VecI{_mm512_maskz_loadu_epi32(first_n(n).v, p)};
}

// ---- stores --------------------------------------------------------------------------------
inline __m256i narrow_bf16(VecF x) {
#if defined(TESSERA_TARGET_AVX512BF16)
  const __m256bh h = _mm512_cvtneps_pbh(x.v);
  return reinterpret_cast<const __m256i&>(h);
#else
  const __m512i u = _mm512_castps_si512(x.v);
  const __m512i lsb =
      _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_maskz_srli_epi32(
      kAll, _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i quiet =
      _mm512_or_si512(_mm512_maskz_srli_epi32(kAll, u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x.v, x.v, _CMP_UNORD_Q);
  return _mm512_maskz_cvtepi32_epi16(kAll, _mm512_mask_blend_epi32(is_nan, rounded, quiet));
#endif
}
inline __m256i narrow_fp16(VecF x) {
  return _mm512_cvtps_ph(x.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline void store(float* p, VecF x) { _mm512_storeu_ps(p, x.v); }
inline void store(bf16* p, VecF x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_bf16(x));
}
inline void store(fp16* p, VecF x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_fp16(x));
}
inline void store(float* p, VecF x, int n) { _mm512_mask_storeu_ps(p, first_n(n).v, x.v); }
inline void store(bf16* p, VecF x, int n) {
  _mm256_mask_storeu_epi16(p, first_n(n).v, narrow_bf16(x));
}
inline void store(fp16* p, VecF x, int n) {
  _mm256_mask_storeu_epi16(p, first_n(n).v, narrow_fp16(x));
}

// ---- arithmetic ----------------------------------------------------------------------------
inline VecF operator+(VecF a, VecF b) { return VecF{_mm512_add_ps(a.v, b.v)}; }
inline VecF operator-(VecF a, VecF b) { return VecF{_mm512_sub_ps(a.v, b.v)}; }
inline VecF operator*(VecF a, VecF b) { return VecF{_mm512_mul_ps(a.v, b.v)}; }
inline VecF operator/(VecF a, VecF b) { return VecF{_mm512_div_ps(a.v, b.v)}; }
inline VecF fmadd(VecF a, VecF b, VecF c) { return VecF{_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline VecF fnmadd(VecF a, VecF b, VecF c) { return VecF{_mm512_fnmadd_ps(a.v, b.v, c.v)}; }
inline VecF max(VecF a, VecF b) { return VecF{_mm512_max_ps(a.v, b.v)}; }
inline VecF min(VecF a, VecF b) { return VecF{_mm512_min_ps(a.v, b.v)}; }
inline VecF abs(VecF a) { return VecF{_mm512_abs_ps(a.v)}; }
inline VecF sqrt(VecF a) { return VecF{_mm512_sqrt_ps(a.v)}; }
inline VecF round_small(VecF x) {
  return VecF{_mm512_roundscale_ps(x.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
// vscalefps applies 2^k in one rounding step.
inline VecF scale_pow2(VecF p, VecF k) { return VecF{_mm512_scalef_ps(p.v, k.v)}; }
inline float reduce_add(VecF a) { return _mm512_reduce_add_ps(a.v); }
inline float reduce_max(VecF a) { return _mm512_reduce_max_ps(a.v); }

// ---- masks ---------------------------------------------------------------------------------
inline Mask from_bits(uint32_t bits) { return Mask{static_cast<__mmask16>(bits)}; }
inline uint32_t to_bits(Mask m) { return m.v; }
inline Mask operator&(Mask a, Mask b) { return Mask{static_cast<__mmask16>(a.v & b.v)}; }
inline Mask operator|(Mask a, Mask b) { return Mask{static_cast<__mmask16>(a.v | b.v)}; }
inline bool any(Mask m) { return m.v != 0; }
inline Mask cmp_ge(VecF a, VecF b) { return Mask{_mm512_cmp_ps_mask(a.v, b.v, _CMP_GE_OQ)}; }
inline Mask cmp_lt(VecF a, VecF b) { return Mask{_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)}; }
inline Mask cmp_neq(VecF a, VecF b) { return Mask{_mm512_cmp_ps_mask(a.v, b.v, _CMP_NEQ_OQ)}; }
inline Mask non_finite(VecF a) {
  // vfpclassps categories: QNaN (0x01), +Inf (0x08), -Inf (0x10), SNaN (0x80).
  return Mask{_mm512_fpclass_ps_mask(a.v, 0x01 | 0x08 | 0x10 | 0x80)};
}
inline Mask cmp_le_i(VecI a, VecI b) {
  return Mask{_mm512_cmp_epi32_mask(a.v, b.v, _MM_CMPINT_LE)};
}
inline VecF select(Mask m, VecF a, VecF b) { return VecF{_mm512_mask_blend_ps(m.v, b.v, a.v)}; }
inline VecF zero_unless(Mask m, VecF a) { return VecF{_mm512_maskz_mov_ps(m.v, a.v)}; }

// ---- 32-bit integer lanes ------------------------------------------------------------------
inline VecI operator+(VecI a, VecI b) { return VecI{_mm512_add_epi32(a.v, b.v)}; }
inline VecI operator^(VecI a, VecI b) { return VecI{_mm512_xor_si512(a.v, b.v)}; }
inline VecI shift_right(VecI a, int bits) {
  return VecI{_mm512_maskz_srli_epi32(kAll, a.v, static_cast<unsigned>(bits))};
}
// vpmuludq multiplies the even 32-bit lanes into 64-bit products; the odd lanes go through a
// second product of the inputs shifted down.
inline void mul_wide_u32(VecI a, VecI b, VecI* hi, VecI* lo) {
  const __m512i even = _mm512_maskz_mul_epu32(kAll8, a.v, b.v);
  const __m512i odd = _mm512_maskz_mul_epu32(kAll8, _mm512_maskz_srli_epi64(kAll8, a.v, 32),
                                             _mm512_maskz_srli_epi64(kAll8, b.v, 32));
  constexpr __mmask16 kOdd = 0xAAAA;
  hi->v = _mm512_mask_blend_epi32(kOdd, _mm512_maskz_srli_epi64(kAll8, even, 32), odd);
  lo->v = _mm512_mask_blend_epi32(kOdd, even, _mm512_maskz_slli_epi64(kAll8, odd, 32));
}
inline VecF to_float(VecI a) { return VecF{_mm512_maskz_cvtepi32_ps(kAll, a.v)}; }

// ---- narrow codes (weight-only quantization): as vec_generic.h, whole blocks only ------------
inline VecF load(const int8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return to_float(VecI{_mm512_maskz_cvtepi8_epi32(kAll, b)});
}
inline VecI load_u8(const uint8_t* p) {
  return VecI{
      _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
// The 12 bytes in every 128-bit lane; lane L's shuffle puts group L's three bytes big-endian
// into each 32-bit word, and a per-word shift left moves field k of the group to the top.
inline VecI unpack6_top_of(__m128i bytes) {
  const __m512i all = _mm512_maskz_broadcast_i32x4(kAll, bytes);
  const __m512i order =
      _mm512_set_epi32(0x80090A0B, 0x80090A0B, 0x80090A0B, 0x80090A0B, 0x80060708, 0x80060708,
                       0x80060708, 0x80060708, 0x80030405, 0x80030405, 0x80030405, 0x80030405,
                       0x80000102, 0x80000102, 0x80000102, 0x80000102);
  const __m512i words = _mm512_maskz_shuffle_epi8(~__mmask64{0}, all, order);
  const __m512i shifts =
      _mm512_set_epi32(26, 20, 14, 8, 26, 20, 14, 8, 26, 20, 14, 8, 26, 20, 14, 8);
  return VecI{_mm512_maskz_sllv_epi32(kAll, words, shifts)};
}
inline VecI unpack6_top(const uint8_t* p) {
  return unpack6_top_of(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VecI unpack6_top_exact(const uint8_t* p) {
  return unpack6_top_of(_mm_maskz_loadu_epi8(0x0FFF, p));
}

// unpack6x64 (below) exists: AVX512_VBMI's byte permutes, compiled for VBMI alone (not part of
// the AVX-512 targets: Skylake-X and Cooper Lake lack it). Callable only where
// cpu_has_avx512_vbmi(), from a function compiled with TESSERA_VBMI.
constexpr bool kUnpack6x64 = true;
#define TESSERA_VBMI __attribute__((target("avx512vbmi")))

namespace unpack6x64_detail {
struct alignas(64) Bytes64 {
  uint8_t b[64];
};
// The 64 codes come in 16 groups of 4 codes in 3 bytes (b0 b1 b2, the codes' bits most
// significant first). Lane l of out[j] needs code 16j + l, and lanes 2q and 2q + 1 of every
// out[j] share a 64-bit qword q: so qword q holds, for j = 0 .. 3, the pair of codes
// 16j + 2q, 16j + 2q + 1, as the two bytes that contain them — b0 b1 of group 4j + q/2 for an
// even q (its codes 0 and 1), b1 b2 for an odd q (codes 2 and 3) — as a 16-bit big-endian value
// at bits [16j, 16j + 16). In that value the pair's first code is at bits 10-15 (even q) or 6-11
// (odd q), the second at bits 4-9 or 0-5.
constexpr Bytes64 gather_index() {
  Bytes64 x{};
  for (int q = 0; q < 8; ++q)
    for (int j = 0; j < 4; ++j) {
      const int group = 4 * j + q / 2, first = 3 * group + (q % 2);  // the pair's first byte
      x.b[8 * q + 2 * j] = static_cast<uint8_t>(first + 1);          // little-endian: low byte
      x.b[8 * q + 2 * j + 1] = static_cast<uint8_t>(first);
    }
  return x;
}
inline constexpr Bytes64 kGather = gather_index();
// vpmultishiftqb for out[j]: byte k of a qword takes the qword's 8 bits from bit offset[k] on
// (rotating). Lane 2q's 32-bit word (bytes 0-3) gets the pair's first code in bits 0-5 of byte 0
// (offset: the code's lowest bit) and in bits 2-7 of byte 3 (offset 2 lower: the code's top bit,
// the sign, at the word's bit 31); lane 2q + 1 (bytes 4-7) the second code likewise. Bytes 1, 2,
// 5 and 6 are not read.
constexpr Bytes64 shift_control(int j) {
  Bytes64 x{};
  for (int q = 0; q < 8; ++q) {
    const int first = 16 * j + (q % 2 == 0 ? 10 : 6), second = first - 6;
    x.b[8 * q + 0] = static_cast<uint8_t>(first);
    x.b[8 * q + 3] = static_cast<uint8_t>((first - 2) & 63);
    x.b[8 * q + 4] = static_cast<uint8_t>(second);
    x.b[8 * q + 7] = static_cast<uint8_t>((second - 2) & 63);
  }
  return x;
}
inline constexpr Bytes64 kShift[4] = {shift_control(0), shift_control(1), shift_control(2),
                                      shift_control(3)};
}  // namespace unpack6x64_detail

// 64 6-bit fields packed as for unpack6_top (48 bytes) into four vectors: lane l of out[j] holds
// field 16j + l's low 5 bits in bits 0-4 and its top bit in bit 31 (the bits between are
// unspecified): an FP6 code's magnitude index and sign. One byte permute (vpermb) and one
// multishift per 16 fields (vpmultishiftqb). unpack6x64 reads 64 bytes from p (the 16 after the
// 48 must be readable); unpack6x64_exact reads only the 48.
TESSERA_VBMI inline void unpack6x64_of(__m512i bytes, VecI out[4]) {
  using namespace unpack6x64_detail;
  constexpr __mmask64 kAllBytes = ~__mmask64{0};
  const __m512i pairs =
      _mm512_maskz_permutexvar_epi8(kAllBytes, _mm512_load_si512(kGather.b), bytes);
  for (int j = 0; j < 4; ++j)
    out[j] =
        VecI{_mm512_maskz_multishift_epi64_epi8(kAllBytes, _mm512_load_si512(kShift[j].b), pairs)};
}
TESSERA_VBMI inline void unpack6x64(const uint8_t* p, VecI out[4]) {
  unpack6x64_of(_mm512_loadu_si512(p), out);
}
TESSERA_VBMI inline void unpack6x64_exact(const uint8_t* p, VecI out[4]) {
  unpack6x64_of(_mm512_maskz_loadu_epi8((__mmask64{1} << 48) - 1, p), out);
}
inline VecF lookup32(const float* table, VecI idx) {
  return VecF{_mm512_permutex2var_ps(_mm512_loadu_ps(table), idx.v, _mm512_loadu_ps(table + 16))};
}
// table lane (idx & 15) per lane, from a 16-entry table in a register: one vpermps.
inline VecF lookup16(VecF table, VecI idx) { return VecF{_mm512_permutexvar_ps(idx.v, table.v)}; }
inline VecI operator&(VecI a, VecI b) { return VecI{_mm512_and_si512(a.v, b.v)}; }
inline VecI shift_left(VecI a, int bits) {
  return VecI{_mm512_maskz_slli_epi32(kAll, a.v, static_cast<unsigned>(bits))};
}
inline VecF xor_bits(VecF a, VecI b) {
  return VecF{_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a.v), b.v))};
}
inline VecF bits_to_float(VecI a) { return VecF{_mm512_castsi512_ps(a.v)}; }
inline void interleave4(const VecI in[4], VecI out[4]) {
  // 32-bit unpacks give (w0, w1) and (w2, w3) pairs of each counter, 64-bit unpacks whole
  // 4-word groups per 128-bit lane; two 128-bit-lane permutes put the groups in order.
  const __m512i a = _mm512_unpacklo_epi32(in[0].v, in[1].v);  // counters 0,1 | 4,5 | ...
  const __m512i b = _mm512_unpackhi_epi32(in[0].v, in[1].v);  // counters 2,3 | 6,7 | ...
  const __m512i c = _mm512_unpacklo_epi32(in[2].v, in[3].v);
  const __m512i d = _mm512_unpackhi_epi32(in[2].v, in[3].v);
  // Per 128-bit lane q: g0 = counter 4q, g1 = 4q + 1, g2 = 4q + 2, g3 = 4q + 3 (4 words each).
  const __m512i g0 = _mm512_unpacklo_epi64(a, c), g1 = _mm512_unpackhi_epi64(a, c);
  const __m512i g2 = _mm512_unpacklo_epi64(b, d), g3 = _mm512_unpackhi_epi64(b, d);
  // out[k] holds counters 4k .. 4k + 3: 128-bit lane k of g0, g1, g2, g3 in that order.
  const __m512i lo01 = _mm512_shuffle_i64x2(g0, g1, 0x44);  // g0.q0 g0.q1 g1.q0 g1.q1
  const __m512i hi01 = _mm512_shuffle_i64x2(g0, g1, 0xEE);  // g0.q2 g0.q3 g1.q2 g1.q3
  const __m512i lo23 = _mm512_shuffle_i64x2(g2, g3, 0x44);
  const __m512i hi23 = _mm512_shuffle_i64x2(g2, g3, 0xEE);
  out[0].v = _mm512_shuffle_i64x2(lo01, lo23, 0x88);  // g0.q0 g1.q0 g2.q0 g3.q0
  out[1].v = _mm512_shuffle_i64x2(lo01, lo23, 0xDD);  // g0.q1 g1.q1 g2.q1 g3.q1
  out[2].v = _mm512_shuffle_i64x2(hi01, hi23, 0x88);
  out[3].v = _mm512_shuffle_i64x2(hi01, hi23, 0xDD);
}

// ---- fp64 accumulation ---------------------------------------------------------------------
inline VecD zero_d() { return VecD{_mm512_setzero_pd(), _mm512_setzero_pd()}; }
inline VecD add_squares(VecD acc, VecF x) {
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x.v));
  const __m512d hi = _mm512_cvtps_pd(
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x.v), 1)));
  return VecD{_mm512_fmadd_pd(lo, lo, acc.lo), _mm512_fmadd_pd(hi, hi, acc.hi)};
}
inline VecD operator+(VecD a, VecD b) {
  return VecD{_mm512_add_pd(a.lo, b.lo), _mm512_add_pd(a.hi, b.hi)};
}
inline double reduce_add(VecD a) { return _mm512_reduce_add_pd(_mm512_add_pd(a.lo, a.hi)); }

// ---- layout --------------------------------------------------------------------------------
// The usual 64-shuffle 16 x 16 transpose: unpacks within 128-bit lanes, then 128-bit shuffles.
inline void transpose16(VecF (&x)[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(x[2 * i].v, x[2 * i + 1].v);
    t[2 * i + 1] = _mm512_unpackhi_ps(x[2 * i].v, x[2 * i + 1].v);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    x[4 * i].v = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    x[4 * i + 1].v = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    x[4 * i + 2].v = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    x[4 * i + 3].v = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      t[8 * i + k] = _mm512_shuffle_f32x4(x[8 * i + k].v, x[8 * i + 4 + k].v, 0x88);
      t[8 * i + 4 + k] = _mm512_shuffle_f32x4(x[8 * i + k].v, x[8 * i + 4 + k].v, 0xDD);
    }
  }
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    x[k].v = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
    x[8 + k].v = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xDD);
  }
}
inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

TESSERA_TARGET_END
