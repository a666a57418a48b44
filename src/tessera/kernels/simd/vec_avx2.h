// The vector layer on AVX2 + FMA + F16C (x86-64-v3): a 16-lane vector is two ymm registers,
// a mask two ymm registers of all-ones/zero lanes. fp32 tails use vmaskmovps (no access outside
// the mask); 16-bit tails go through a full-width buffer (AVX2 has no 16-bit masked load).
// bf16 stores round with integer arithmetic, bit for bit as bf16::from_float; fp16 uses F16C.
//
// Same functions and contracts as vec_generic.h (the reference); included by simd/vec.h.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tessera/core/dtype.h"

TESSERA_TARGET_BEGIN

constexpr int kLanes = 16;
// 6 rows x 1 vector (two ymm) = 12 accumulators + 2 B registers + 1 broadcast of the 16 ymm.
constexpr int kTileRows = 6;
constexpr int kTileVecs = 1;
// Blocking of the GEMM micro-kernel (kernels/gemm_packed.cc): 6 rows x 1 vector (two ymm) =
// 12 accumulators + 2 B registers + 1 broadcast of the 16 ymm, the classic 6 x 16.
constexpr int kGemmRows = 6;
constexpr int kGemmVecs = 1;
// No lookup16 here: two permutes, a shift and a blend per 8 lanes would be no faster than the
// arithmetic the 4-bit kernel does instead.
constexpr bool kFastLookup16 = false;
constexpr bool kUnpack6x64 = false;  // no unpack6x64: it needs AVX512_VBMI's byte permutes
#define TESSERA_VBMI                 // (so code naming it compiles; nothing calls it here)

struct VecF {
  __m256 lo, hi;  // lanes 0-7, 8-15
};
struct VecI {
  __m256i lo, hi;
};
struct VecD {  // 16 fp64 lanes, four per register
  __m256d d[4];
};
struct Mask {
  __m256i lo, hi;
};

inline VecF zero() { return VecF{_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline VecF splat(float x) { return VecF{_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline VecI splat_i(int32_t x) { return VecI{_mm256_set1_epi32(x), _mm256_set1_epi32(x)}; }
inline VecI iota_i() {
  return VecI{_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
              _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15)};
}
inline Mask first_n(int n) {
  const __m256i vn = _mm256_set1_epi32(n);
  const VecI idx = iota_i();
  return Mask{_mm256_cmpgt_epi32(vn, idx.lo), _mm256_cmpgt_epi32(vn, idx.hi)};
}

// ---- loads ---------------------------------------------------------------------------------
// 8 bf16 from memory: one vpmovzxwd with its load folded in, then a shift (a 256-bit load and
// vextracti128 for the upper half is one more instruction per vector: the bf16 norms took 16-20%
// longer with it at 1 thread, cache-resident, bench/pointwise_bench 2026-12-02).
inline __m256 widen_bf16(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline VecF load(const float* p) { return VecF{_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
// splat_bf16 (contract in vec_generic.h): one broadcast load of the 32-bit word at p (p[0] in its
// low half) and a shift: an fp32 broadcast's cost plus one integer op, which needs no FMA port.
inline VecF splat_bf16(const bf16* p) {
  float pair;  // the two bf16's bits (memcpy: no aliasing of bf16 storage as float)
  std::memcpy(&pair, p, sizeof pair);
  const __m256 x =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(_mm256_set1_ps(pair)), 16));
  return VecF{x, x};
}
inline VecF load(const bf16* p) { return VecF{widen_bf16(p), widen_bf16(p + 8)}; }
inline VecF load(const fp16* p) {
  return VecF{_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
              _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
}
inline VecF load(const float* p, int n) {
  if (n >= kLanes) return load(p);
  const Mask m = first_n(n);
  return VecF{_mm256_maskload_ps(p, m.lo), _mm256_maskload_ps(p + 8, m.hi)};
}
inline VecI load_i(const int32_t* p, int n) {
  const Mask m = first_n(n);
  return VecI{_mm256_maskload_epi32(p, m.lo), _mm256_maskload_epi32(p + 8, m.hi)};
}

// ---- stores --------------------------------------------------------------------------------
// Rounds 8 lanes to bf16 (nearest even) in the low 16 bits of each 32-bit lane, for lanes that
// are not NaN: u + 0x7FFF + (bit 16 of u), then the upper half.
inline __m256i round_bf16_not_nan(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))),
                           16);
}
// The same for every lane: NaN stays NaN with the quiet bit set.
inline __m256i round_bf16(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(round_bf16_not_nan(x)),
                                              _mm256_castsi256_ps(quiet), is_nan));
}
// 16 lanes to bf16 in order. NaN is rare, so one test of both halves picks the rounding without
// the per-lane NaN select (three instructions of ~10 per 8 lanes, and vblendvps is 2-3 uops on
// Intel cores).
inline __m256i narrow_bf16(VecF x) {
  const __m256 any_nan = _mm256_or_ps(_mm256_cmp_ps(x.lo, x.lo, _CMP_UNORD_Q),
                                      _mm256_cmp_ps(x.hi, x.hi, _CMP_UNORD_Q));
  // packus works within 128-bit lanes: (lo.0-3, hi.0-3 | lo.4-7, hi.4-7); restore the order.
  const __m256i packed =
      __builtin_expect(_mm256_testz_ps(any_nan, any_nan), 1)
          ? _mm256_packus_epi32(round_bf16_not_nan(x.lo), round_bf16_not_nan(x.hi))
          : _mm256_packus_epi32(round_bf16(x.lo), round_bf16(x.hi));
  return _mm256_permute4x64_epi64(packed, 0xD8);
}
inline __m256i narrow_fp16(VecF x) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  return _mm256_set_m128i(_mm256_cvtps_ph(x.hi, kRound), _mm256_cvtps_ph(x.lo, kRound));
}
inline void store(float* p, VecF x) {
  _mm256_storeu_ps(p, x.lo);
  _mm256_storeu_ps(p + 8, x.hi);
}
inline void store(bf16* p, VecF x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_bf16(x));
}
inline void store(fp16* p, VecF x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_fp16(x));
}
inline void store(float* p, VecF x, int n) {
  if (n >= kLanes) return store(p, x);
  const Mask m = first_n(n);
  _mm256_maskstore_ps(p, m.lo, x.lo);
  _mm256_maskstore_ps(p + 8, m.hi, x.hi);
}
// Counted bf16 and fp16 loads and stores.
#include "tessera/kernels/simd/vec_tail.inc"

// ---- arithmetic ----------------------------------------------------------------------------
#define TESSERA_AVX2_BINARY(name, intrinsic) \
  inline VecF name(VecF a, VecF b) { return VecF{intrinsic(a.lo, b.lo), intrinsic(a.hi, b.hi)}; }
TESSERA_AVX2_BINARY(operator+, _mm256_add_ps)
TESSERA_AVX2_BINARY(operator-, _mm256_sub_ps)
TESSERA_AVX2_BINARY(operator*, _mm256_mul_ps)
TESSERA_AVX2_BINARY(operator/, _mm256_div_ps)
TESSERA_AVX2_BINARY(max, _mm256_max_ps)
TESSERA_AVX2_BINARY(min, _mm256_min_ps)
#undef TESSERA_AVX2_BINARY
inline VecF fmadd(VecF a, VecF b, VecF c) {
  return VecF{_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline VecF fnmadd(VecF a, VecF b, VecF c) {
  return VecF{_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)};
}
inline VecF abs(VecF a) {
  const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  return VecF{_mm256_and_ps(a.lo, m), _mm256_and_ps(a.hi, m)};
}
inline VecF sqrt(VecF a) { return VecF{_mm256_sqrt_ps(a.lo), _mm256_sqrt_ps(a.hi)}; }
inline VecF round_small(VecF x) {
  constexpr int kMode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  return VecF{_mm256_round_ps(x.lo, kMode), _mm256_round_ps(x.hi, kMode)};
}
// p * 2^k in two normal powers of two; the first product is exact (see vec_generic.h).
inline __m256 scale_pow2_half(__m256 p, __m256 k) {
  const __m256i ki = _mm256_cvtps_epi32(k);
  const __m256i k1 = _mm256_srai_epi32(_mm256_add_epi32(ki, _mm256_srli_epi32(ki, 31)), 1);
  const __m256i k2 = _mm256_sub_epi32(ki, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
inline VecF scale_pow2(VecF p, VecF k) {
  return VecF{scale_pow2_half(p.lo, k.lo), scale_pow2_half(p.hi, k.hi)};
}
// The tree of vec_generic.h: (i, i + 8), (i, i + 4), (i, i + 2), (0, 1).
inline float reduce_add(VecF a) {
  const __m256 s8 = _mm256_add_ps(a.lo, a.hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
inline float reduce_max(VecF a) {
  const __m256 s8 = _mm256_max_ps(a.lo, a.hi);
  const __m128 s4 = _mm_max_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_max_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_max_ss(s2, _mm_movehdup_ps(s2)));
}

// ---- masks ---------------------------------------------------------------------------------
inline Mask from_bits(uint32_t bits) {
  const VecI idx = iota_i();
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i b = _mm256_set1_epi32(static_cast<int32_t>(bits));
  const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(b, idx.lo), one);
  const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(b, idx.hi), one);
  return Mask{_mm256_cmpeq_epi32(lo, one), _mm256_cmpeq_epi32(hi, one)};
}
inline uint32_t to_bits(Mask m) {
  return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(m.lo))) |
         static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(m.hi))) << 8;
}
inline Mask operator&(Mask a, Mask b) {
  return Mask{_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)};
}
inline Mask operator|(Mask a, Mask b) {
  return Mask{_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)};
}
inline bool any(Mask m) { return !_mm256_testz_si256(_mm256_or_si256(m.lo, m.hi), _mm256_set1_epi32(-1)); }
template <int kPredicate>
inline Mask compare(VecF a, VecF b) {
  return Mask{_mm256_castps_si256(_mm256_cmp_ps(a.lo, b.lo, kPredicate)),
              _mm256_castps_si256(_mm256_cmp_ps(a.hi, b.hi, kPredicate))};
}
inline Mask cmp_ge(VecF a, VecF b) { return compare<_CMP_GE_OQ>(a, b); }
inline Mask cmp_lt(VecF a, VecF b) { return compare<_CMP_LT_OQ>(a, b); }
inline Mask cmp_neq(VecF a, VecF b) { return compare<_CMP_NEQ_OQ>(a, b); }
inline Mask non_finite(VecF a) {
  const __m256i e = _mm256_set1_epi32(0x7f800000);
  return Mask{_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(a.lo), e), e),
              _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(a.hi), e), e)};
}
inline Mask cmp_le_i(VecI a, VecI b) {
  const __m256i all = _mm256_set1_epi32(-1);
  return Mask{_mm256_xor_si256(_mm256_cmpgt_epi32(a.lo, b.lo), all),
              _mm256_xor_si256(_mm256_cmpgt_epi32(a.hi, b.hi), all)};
}
inline VecF select(Mask m, VecF a, VecF b) {
  return VecF{_mm256_blendv_ps(b.lo, a.lo, _mm256_castsi256_ps(m.lo)),
              _mm256_blendv_ps(b.hi, a.hi, _mm256_castsi256_ps(m.hi))};
}
inline VecF zero_unless(Mask m, VecF a) {
  return VecF{_mm256_and_ps(_mm256_castsi256_ps(m.lo), a.lo),
              _mm256_and_ps(_mm256_castsi256_ps(m.hi), a.hi)};
}

// ---- 32-bit integer lanes ------------------------------------------------------------------
inline VecI operator+(VecI a, VecI b) {
  return VecI{_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)};
}
inline VecI operator^(VecI a, VecI b) {
  return VecI{_mm256_xor_si256(a.lo, b.lo), _mm256_xor_si256(a.hi, b.hi)};
}
inline VecI shift_right(VecI a, int bits) {
  const __m128i count = _mm_cvtsi32_si128(bits);
  return VecI{_mm256_srl_epi32(a.lo, count), _mm256_srl_epi32(a.hi, count)};
}
inline void mul_wide_half(__m256i a, __m256i b, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(a, b);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), _mm256_srli_epi64(b, 32));
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}
inline void mul_wide_u32(VecI a, VecI b, VecI* hi, VecI* lo) {
  mul_wide_half(a.lo, b.lo, &hi->lo, &lo->lo);
  mul_wide_half(a.hi, b.hi, &hi->hi, &lo->hi);
}
inline VecF to_float(VecI a) { return VecF{_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }

// ---- narrow codes (weight-only quantization): as vec_generic.h, whole blocks only ------------
inline __m128i load_8_bytes(const void* p) {
  int64_t bits;
  std::memcpy(&bits, p, 8);
  return _mm_cvtsi64_si128(bits);
}
inline VecF load(const int8_t* p) {
  return to_float(
      VecI{_mm256_cvtepi8_epi32(load_8_bytes(p)), _mm256_cvtepi8_epi32(load_8_bytes(p + 8))});
}
inline VecI load_u8(const uint8_t* p) {
  return VecI{_mm256_cvtepu8_epi32(load_8_bytes(p)), _mm256_cvtepu8_epi32(load_8_bytes(p + 8))};
}
// The 12 bytes in both 128-bit lanes of each half; the shuffles put a group's three bytes
// big-endian into each 32-bit word (half lo: groups 0 and 1, hi: 2 and 3), and a per-word shift
// left moves field k of the group to the top.
inline VecI unpack6_top_of(__m128i bytes) {
  const __m256i all = _mm256_broadcastsi128_si256(bytes);
  const __m256i order_lo = _mm256_set_epi32(0x80030405, 0x80030405, 0x80030405, 0x80030405,
                                            0x80000102, 0x80000102, 0x80000102, 0x80000102);
  const __m256i order_hi = _mm256_set_epi32(0x80090A0B, 0x80090A0B, 0x80090A0B, 0x80090A0B,
                                            0x80060708, 0x80060708, 0x80060708, 0x80060708);
  const __m256i shifts = _mm256_set_epi32(26, 20, 14, 8, 26, 20, 14, 8);
  return VecI{_mm256_sllv_epi32(_mm256_shuffle_epi8(all, order_lo), shifts),
              _mm256_sllv_epi32(_mm256_shuffle_epi8(all, order_hi), shifts)};
}
inline VecI unpack6_top(const uint8_t* p) {
  return unpack6_top_of(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VecI unpack6_top_exact(const uint8_t* p) {
  int32_t last;
  std::memcpy(&last, p + 8, 4);
  return unpack6_top_of(_mm_insert_epi32(load_8_bytes(p), last, 2));
}
// Four 8-entry permutes, then blends on index bits 3 and 4 (moved to the sign bit blendv reads).
inline __m256 lookup32_half(const float* table, __m256i idx) {
  const __m256 p0 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table), idx);
  const __m256 p1 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table + 8), idx);
  const __m256 p2 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table + 16), idx);
  const __m256 p3 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table + 24), idx);
  const __m256 bit3 = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28));
  const __m256 bit4 = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 27));
  return _mm256_blendv_ps(_mm256_blendv_ps(p0, p1, bit3), _mm256_blendv_ps(p2, p3, bit3), bit4);
}
inline VecF lookup32(const float* table, VecI idx) {
  return VecF{lookup32_half(table, idx.lo), lookup32_half(table, idx.hi)};
}
inline VecI operator&(VecI a, VecI b) {
  return VecI{_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)};
}
inline VecI shift_left(VecI a, int bits) {
  const __m128i count = _mm_cvtsi32_si128(bits);
  return VecI{_mm256_sll_epi32(a.lo, count), _mm256_sll_epi32(a.hi, count)};
}
inline VecF xor_bits(VecF a, VecI b) {
  return VecF{_mm256_xor_ps(a.lo, _mm256_castsi256_ps(b.lo)),
              _mm256_xor_ps(a.hi, _mm256_castsi256_ps(b.hi))};
}
inline VecF bits_to_float(VecI a) {
  return VecF{_mm256_castsi256_ps(a.lo), _mm256_castsi256_ps(a.hi)};
}
inline void interleave4(const VecI in[4], VecI out[4]) {
  // Per half h (counters 8h .. 8h + 7): unpacks give each counter's four words in one 128-bit
  // lane (g0: counters 8h, 8h+4; g1: 8h+1, 8h+5; ...), 128-bit permutes put them in order.
  for (int h = 0; h < 2; ++h) {
    const __m256i w0 = h ? in[0].hi : in[0].lo, w1 = h ? in[1].hi : in[1].lo;
    const __m256i w2 = h ? in[2].hi : in[2].lo, w3 = h ? in[3].hi : in[3].lo;
    const __m256i a = _mm256_unpacklo_epi32(w0, w1), b = _mm256_unpackhi_epi32(w0, w1);
    const __m256i c = _mm256_unpacklo_epi32(w2, w3), d = _mm256_unpackhi_epi32(w2, w3);
    const __m256i g0 = _mm256_unpacklo_epi64(a, c), g1 = _mm256_unpackhi_epi64(a, c);
    const __m256i g2 = _mm256_unpacklo_epi64(b, d), g3 = _mm256_unpackhi_epi64(b, d);
    // Counters 8h + 0..3 form out[2h], 8h + 4..7 form out[2h + 1].
    __m256i& first = h ? out[2].lo : out[0].lo;
    __m256i& second = h ? out[2].hi : out[0].hi;
    __m256i& third = h ? out[3].lo : out[1].lo;
    __m256i& fourth = h ? out[3].hi : out[1].hi;
    first = _mm256_permute2x128_si256(g0, g1, 0x20);   // counters 8h, 8h + 1
    second = _mm256_permute2x128_si256(g2, g3, 0x20);  // 8h + 2, 8h + 3
    third = _mm256_permute2x128_si256(g0, g1, 0x31);   // 8h + 4, 8h + 5
    fourth = _mm256_permute2x128_si256(g2, g3, 0x31);  // 8h + 6, 8h + 7
  }
}

// ---- fp64 accumulation ---------------------------------------------------------------------
inline VecD zero_d() {
  return VecD{{_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
               _mm256_setzero_pd()}};
}
inline VecD add_squares(VecD acc, VecF x) {
  const __m256d q[4] = {_mm256_cvtps_pd(_mm256_castps256_ps128(x.lo)),
                        _mm256_cvtps_pd(_mm256_extractf128_ps(x.lo, 1)),
                        _mm256_cvtps_pd(_mm256_castps256_ps128(x.hi)),
                        _mm256_cvtps_pd(_mm256_extractf128_ps(x.hi, 1))};
  for (int i = 0; i < 4; ++i) acc.d[i] = _mm256_fmadd_pd(q[i], q[i], acc.d[i]);
  return acc;
}
inline VecD operator+(VecD a, VecD b) {
  for (int i = 0; i < 4; ++i) a.d[i] = _mm256_add_pd(a.d[i], b.d[i]);
  return a;
}
// Lanes (i, i + 8), then (i, i + 4), (i, i + 2), (0, 1), as vec_generic.h.
inline double reduce_add(VecD a) {
  const __m256d s0 = _mm256_add_pd(a.d[0], a.d[2]);  // lanes 0-3 + 8-11
  const __m256d s1 = _mm256_add_pd(a.d[1], a.d[3]);  // lanes 4-7 + 12-15
  const __m256d s4 = _mm256_add_pd(s0, s1);
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

// ---- layout --------------------------------------------------------------------------------
// 16 x 16 as four 8 x 8 blocks, each the usual unpack / shuffle / 128-bit permute sequence.
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x31);
  }
}
inline void transpose16(VecF (&x)[16]) {
  __m256 a[8], b[8], c[8], d[8];  // blocks (rows 0-7, cols 0-7), (0-7, 8-15), (8-15, 0-7), ...
  for (int i = 0; i < 8; ++i) {
    a[i] = x[i].lo;
    b[i] = x[i].hi;
    c[i] = x[8 + i].lo;
    d[i] = x[8 + i].hi;
  }
  transpose8(a);
  transpose8(b);
  transpose8(c);
  transpose8(d);
  for (int i = 0; i < 8; ++i) {
    x[i] = VecF{a[i], c[i]};
    x[8 + i] = VecF{b[i], d[i]};
  }
}
inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

TESSERA_TARGET_END
