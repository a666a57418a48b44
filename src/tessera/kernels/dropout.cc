#include "tessera/kernels/dropout.h"

#include <immintrin.h>

#include <cstring>

#include "tessera/core/dtype.h"
#include "tessera/kernels/simd.h"
#include "tessera/core/error.h"

namespace tessera::kernels {
namespace {

using simd::lane_mask;
using simd::load16;
using simd::store16;

constexpr int64_t kParallelThreshold = 1 << 14;

// Philox4x32-10 key schedule: (k0, k1) for each of the 10 rounds.
struct KeySchedule {
  uint32_t k[10][2];
  explicit KeySchedule(PhiloxKey key) {
    uint32_t k0 = key.k0, k1 = key.k1;
    for (int round = 0; round < 10; ++round) {
      k[round][0] = k0;
      k[round][1] = k1;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
  }
};

// philox_block(key, row, col4 + i) for i = 0..15 at once (col4 a multiple of 16), returned in
// element order: out[k] holds the 16 values for columns 4*col4 + 16k ... + 15. Same rounds as
// philox4x32 in core/philox.h (the tests check it against that). The 16 counters are held as
// two halves of 8, each 32-bit word in the low half of a 64-bit lane, so one vpmuludq gives the
// whole 32x32 -> 64 bit product (hi = product >> 32, lo = its low half; the garbage above a
// low half is never read, as vpmuludq only reads the low 32 bits of each lane).
inline void philox_64(const KeySchedule& ks, uint64_t row, uint64_t col4, __m512i out[4]) {
  const __m512i mul0 = _mm512_set1_epi64(0xD2511F53u);
  const __m512i mul1 = _mm512_set1_epi64(0xCD9E8D57u);
  const __m512i row_lo = _mm512_set1_epi64(static_cast<uint32_t>(row));
  const __m512i row_hi = _mm512_set1_epi64(static_cast<uint32_t>(row >> 32));
  // col4 is a multiple of 16, so col4 + i never carries into the high word.
  const __m512i col_hi = _mm512_set1_epi64(static_cast<uint32_t>(col4 >> 32));
  const __m512i col_lo = _mm512_set1_epi64(static_cast<uint32_t>(col4));
  __m512i c0[2] = {row_lo, row_lo}, c1[2] = {row_hi, row_hi}, c3[2] = {col_hi, col_hi};
  __m512i c2[2] = {_mm512_add_epi64(col_lo, _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7)),
                   _mm512_add_epi64(col_lo, _mm512_setr_epi64(8, 9, 10, 11, 12, 13, 14, 15))};
  for (int round = 0; round < 10; ++round) {
    const __m512i k0 = _mm512_set1_epi32(static_cast<int>(ks.k[round][0]));
    const __m512i k1 = _mm512_set1_epi32(static_cast<int>(ks.k[round][1]));
    for (int h = 0; h < 2; ++h) {
      const __m512i p0 = _mm512_mul_epu32(c0[h], mul0);
      const __m512i p1 = _mm512_mul_epu32(c2[h], mul1);
      // 0x96: three-way xor.
      c0[h] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1[h], k0, 0x96);
      c1[h] = p1;
      c2[h] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3[h], k1, 0x96);
      c3[h] = p0;
    }
  }
  // Half h holds blocks 8h + b (b = 0..7) in 64-bit lane b. Pack words 0,1 and 2,3 of each
  // block into one 64-bit lane each, pair them into whole blocks (even blocks in `even`, odd in
  // `odd`, one per 128-bit lane), then interleave the 128-bit lanes into block order.
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  for (int h = 0; h < 2; ++h) {
    const __m512i w01 = _mm512_mask_blend_epi32(0xAAAA, c0[h], _mm512_slli_epi64(c1[h], 32));
    const __m512i w23 = _mm512_mask_blend_epi32(0xAAAA, c2[h], _mm512_slli_epi64(c3[h], 32));
    const __m512i even = _mm512_unpacklo_epi64(w01, w23), odd = _mm512_unpackhi_epi64(w01, w23);
    out[2 * h] = _mm512_permutex2var_epi64(even, first, odd);
    out[2 * h + 1] = _mm512_permutex2var_epi64(even, second, odd);
  }
}

// Forward and backward are the same map: keep-and-scale or zero, by the global mask.
template <typename T>
void apply_dropout(T* out, const T* inp, PhiloxKey key, const TokenCoords& coords, int64_t N,
                   int64_t C, float p) {
  TESSERA_CHECK(N >= 0 && C > 0);
  TESSERA_CHECK_MSG(p >= 0.0f && p < 1.0f, "dropout probability must be in [0, 1)");
  TESSERA_CHECK(coords.local_seq > 0 && coords.global_seq > 0);
  if (p == 0.0f) {
    if (out != inp) std::memmove(out, inp, static_cast<size_t>(N * C) * sizeof(T));
    return;
  }
  const __m512 scale = _mm512_set1_ps(1.0f / (1.0f - p));
  // uint_to_unit_float(x) = (x >> 8) * 2^-24 exactly, so "uniform >= p" is the exact float
  // comparison (x >> 8) >= p * 2^24 (both sides exact in fp32).
  const __m512 threshold = _mm512_set1_ps(p * 16777216.0f);
  const KeySchedule ks(key);
#pragma omp parallel for schedule(static) if (N * C > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    const uint64_t row = static_cast<uint64_t>(coords.global_row(n));
    const T* x = inp + n * C;
    T* o = out + n * C;
    for (int64_t c0 = 0; c0 < C; c0 += 64) {
      __m512i bits[4];
      philox_64(ks, row, static_cast<uint64_t>(c0 / 4), bits);
      for (int k = 0; k < 4 && c0 + 16 * k < C; ++k) {
        const int64_t c = c0 + 16 * k;
        const __mmask16 m = lane_mask(c, C);
        const __m512 u = _mm512_cvtepi32_ps(_mm512_srli_epi32(bits[k], 8));
        const __mmask16 keep = _mm512_cmp_ps_mask(u, threshold, _CMP_GE_OQ);
        store16(o + c, _mm512_maskz_mul_ps(keep, load16(x + c, m), scale), m);
      }
    }
  }
}

}  // namespace

template <typename T>
void dropout_forward(T* out, const T* inp, PhiloxKey key, TokenCoords coords, int64_t N, int64_t C,
                     float p) {
  apply_dropout(out, inp, key, coords, N, C, p);
}

template <typename T>
void dropout_backward(T* dinp, const T* dout, PhiloxKey key, TokenCoords coords, int64_t N,
                      int64_t C, float p) {
  apply_dropout(dinp, dout, key, coords, N, C, p);
}

template void dropout_forward<float>(float*, const float*, PhiloxKey, TokenCoords, int64_t, int64_t,
                                     float);
template void dropout_forward<bf16>(bf16*, const bf16*, PhiloxKey, TokenCoords, int64_t, int64_t,
                                    float);
template void dropout_backward<float>(float*, const float*, PhiloxKey, TokenCoords, int64_t,
                                      int64_t, float);
template void dropout_backward<bf16>(bf16*, const bf16*, PhiloxKey, TokenCoords, int64_t, int64_t,
                                     float);
template void dropout_forward<fp16>(fp16*, const fp16*, PhiloxKey, TokenCoords, int64_t, int64_t,
                                    float);
template void dropout_backward<fp16>(fp16*, const fp16*, PhiloxKey, TokenCoords, int64_t, int64_t,
                                     float);

}  // namespace tessera::kernels
