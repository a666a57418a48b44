// 32 bf16 lanes and their dot products, on the avx512bf16 target only (TESSERA_BF16_DOT is
// defined there): for kernels whose weights decode to bf16 numbers exactly — FP6 e3m2 values,
// 4-bit codes (as 1 + q/16), an int8 code's two halves — and whose inputs are bf16. vdpbf16ps
// multiplies 32 pairs of bf16 exactly and adds each two products into one fp32 lane, so a decoded
// weight costs a 16-bit lookup or two bit operations instead of a widening to fp32, a lookup and
// a multiply-add per 16 weights.
// Its sums round to nearest even in fp32 and treat subnormal inputs and results as zero.
//
// VecW holds 32 16-bit lanes (bf16 bits or small integers); word tables are 32 or 64 entries
// held in registers. unpack6x64_words needs AVX512_VBMI as unpack6x64 does (TESSERA_VBMI,
// callable only where cpu_has_avx512_vbmi()). Included by simd/vec.h after vec_avx512.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "tessera/core/dtype.h"

#define TESSERA_BF16_DOT 1

TESSERA_TARGET_BEGIN

struct VecW {
  __m512i v;
};
constexpr __mmask32 kAllWords = ~__mmask32{0};

inline VecW load_words(const void* p) { return VecW{_mm512_loadu_si512(p)}; }
// 32 signed bytes widened to 32 words.
inline VecW widen_s8_words(const int8_t* p) {
  return VecW{_mm512_maskz_cvtepi8_epi16(kAllWords,
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
// 16 words from p (32 bytes) in lanes 0-15, lanes 16-31 zero.
inline VecW load_half_words(const void* p) {
  return VecW{_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline VecW splat_words(uint16_t w) { return VecW{_mm512_set1_epi16(static_cast<short>(w))}; }
inline VecW shift_left_words(VecW a, unsigned bits) {
  return VecW{_mm512_maskz_slli_epi16(kAllWords, a.v, bits)};
}
// (a & keep) | set, bit by bit (one vpternlogd).
inline VecW keep_and_set_words(VecW a, VecW keep, VecW set) {
  return VecW{_mm512_ternarylogic_epi32(a.v, keep.v, set.v, 0xEA)};
}
inline VecW shift_right_words(VecW a, unsigned bits) {
  return VecW{_mm512_maskz_srli_epi16(kAllWords, a.v, bits)};
}
inline VecW shift_right_arith_words(VecW a, unsigned bits) {
  return VecW{_mm512_maskz_srai_epi16(kAllWords, a.v, bits)};
}
// Lane i: table[idx_i & 31] (one vpermw).
inline VecW lookup32_words(VecW table, VecW idx) {
  return VecW{_mm512_maskz_permutexvar_epi16(kAllWords, idx.v, table.v)};
}
// Lane i: (lo, hi)[idx_i & 63], a 64-entry table in two registers (one vpermt2w).
inline VecW lookup64_words(VecW lo, VecW hi, VecW idx) {
  return VecW{_mm512_maskz_permutex2var_epi16(kAllWords, lo.v, idx.v, hi.v)};
}
// acc lane i + a[2i] * b[2i] + a[2i + 1] * b[2i + 1], a and b bf16 (vdpbf16ps).
inline VecF dot_pairs(VecF acc, VecW a, VecW b) {
  return VecF{
      _mm512_dpbf16_ps(acc.v, reinterpret_cast<__m512bh&>(a.v), reinterpret_cast<__m512bh&>(b.v))};
}

// Lanes kGroupLanes q to kGroupLanes (q + 1) - 1 hold p[q], for the fp16 scales of the groups
// whose products share a vector (kGroupLanes 4 or 8: four or two groups). Only the first n are
// read (the vector layer's masked fp16 load); lanes of the others are zero.
template <int kGroupLanes>
inline VecF splat_groups(const fp16* p, int n) {
  static_assert(kGroupLanes == 4 || kGroupLanes == 8);
  constexpr int kShift = kGroupLanes == 4 ? 2 : 3;
  const __m512i lane_group =
      _mm512_set_epi32(15 >> kShift, 14 >> kShift, 13 >> kShift, 12 >> kShift, 11 >> kShift,
                       10 >> kShift, 9 >> kShift, 8 >> kShift, 7 >> kShift, 6 >> kShift,
                       5 >> kShift, 4 >> kShift, 3 >> kShift, 2 >> kShift, 1 >> kShift, 0);
  return VecF{_mm512_maskz_permutexvar_ps(kAll, lane_group, load(p, n).v)};
}

// to[j] = from[order[j]] for 128 words (each order[j] < 128): each 32 of to from two vpermt2w
// over the four vectors of from and a blend on the index's bit 6.
inline void permute128_words(const uint16_t* from, const uint16_t* order, uint16_t* to) {
  const __m512i v0 = _mm512_loadu_si512(from), v1 = _mm512_loadu_si512(from + 32),
                v2 = _mm512_loadu_si512(from + 64), v3 = _mm512_loadu_si512(from + 96);
  for (int k = 0; k < 4; ++k) {
    const __m512i idx = _mm512_loadu_si512(order + 32 * k);
    const __m512i low = _mm512_maskz_permutex2var_epi16(kAllWords, v0, idx, v1),
                  high = _mm512_maskz_permutex2var_epi16(kAllWords, v2, idx, v3);
    const __mmask32 from_high = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(64));
    _mm512_storeu_si512(to + 32 * k, _mm512_mask_blend_epi16(from_high, low, high));
  }
}

namespace words_detail {
using unpack6x64_detail::Bytes64;  // vec_avx512.h's 64-byte control vectors
struct alignas(64) Words32 {
  uint16_t w[32];
};
// 64 6-bit codes in 48 bytes, 4 codes in each 3 bytes b0 b1 b2 most significant bit first. Word
// k of half h (code c = 32h + k of the 64, t = c % 4 in its group of 3 bytes at 3 (c / 4))
// gathers the two bytes holding the code as a big-endian 16-bit value (low byte the later one):
// codes 0 and 1 of a group lie in b0 b1, codes 2 and 3 in b1 b2. Shifting that value right by
// 10, 4, 6 or 0 (t = 0 .. 3) puts the code in bits 0-5.
constexpr Bytes64 gather_words(int h) {
  Bytes64 x{};
  for (int k = 0; k < 32; ++k) {
    const int c = 32 * h + k, first = 3 * (c / 4) + (c % 4 < 2 ? 0 : 1);
    x.b[2 * k] = static_cast<uint8_t>(first + 1);
    x.b[2 * k + 1] = static_cast<uint8_t>(first);
  }
  return x;
}
constexpr Words32 code_shifts() {
  Words32 x{};
  constexpr uint16_t kShift[4] = {10, 4, 6, 0};
  for (int k = 0; k < 32; ++k) x.w[k] = kShift[k % 4];
  return x;
}
inline constexpr Bytes64 kGatherWords[2] = {gather_words(0), gather_words(1)};
inline constexpr Words32 kCodeShifts = code_shifts();
}  // namespace words_detail

// The 64 6-bit codes at p (48 bytes) into two vectors: code 32h + k in bits 0-5 of lane k of
// out[h] (the bits above are unspecified; lookup64_words reads only bits 0-5). kExact: read only
// the 48 bytes (the last chunk of a buffer); otherwise the 16 after them must be readable.
template <bool kExact>
TESSERA_VBMI inline void unpack6x64_words(const uint8_t* p, VecW out[2]) {
  using namespace words_detail;
  const __m512i bytes =
      kExact ? _mm512_maskz_loadu_epi8((__mmask64{1} << 48) - 1, p) : _mm512_loadu_si512(p);
  const __m512i shifts = _mm512_load_si512(kCodeShifts.w);
  for (int h = 0; h < 2; ++h) {
    const __m512i pairs =
        _mm512_maskz_permutexvar_epi8(~__mmask64{0}, _mm512_load_si512(kGatherWords[h].b), bytes);
    out[h] = VecW{_mm512_maskz_srlv_epi16(kAllWords, pairs, shifts)};
  }
}

TESSERA_TARGET_END
