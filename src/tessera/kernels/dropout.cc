#include "tessera/kernels/dropout.h"

#include <immintrin.h>

#include <cstring>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera::kernels {
namespace {

inline __mmask16 lane_mask(int64_t c, int64_t C) {
  const int64_t left = C - c;
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const bf16* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline void store16(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
inline void store16(bf16* p, __m512 v, __mmask16 m) {
  __m256bh h = _mm512_cvtneps_pbh(v);  // round to nearest even, like bf16::from_float
  _mm256_mask_storeu_epi16(p, m, reinterpret_cast<__m256i&>(h));
}

constexpr int64_t kParallelThreshold = 1 << 14;

// hi and lo 32 bits of a * b (32x32 -> 64 bit) in every lane.
inline void mul_hi_lo(__m512i a, __m512i b, __m512i* hi, __m512i* lo) {
  const __m512i even = _mm512_mul_epu32(a, b);                         // lanes 0, 2, ...
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), b);  // lanes 1, 3, ...
  *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

// philox_block(key, row, col4 + i) for i = 0..15 at once (col4 a multiple of 16), returned in
// element order: out[k] holds the 16 values for columns 4*col4 + 16k ... + 15. Same rounds as
// philox4x32 in core/philox.h, one counter per lane; the tests check it against that.
inline void philox_64(PhiloxKey key, uint64_t row, uint64_t col4, __m512i out[4]) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  const __m512i mul0 = _mm512_set1_epi32(static_cast<int>(kMul0));
  const __m512i mul1 = _mm512_set1_epi32(static_cast<int>(kMul1));
  __m512i c0 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(row)));
  __m512i c1 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(row >> 32)));
  // col4 is a multiple of 16, so col4 + i never carries into the high word.
  __m512i c2 = _mm512_add_epi32(
      _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(col4))),
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(col4 >> 32)));
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, lo0, hi1, lo1;
    mul_hi_lo(c0, mul0, &hi0, &lo0);
    mul_hi_lo(c2, mul1, &hi1, &lo1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
    c1 = lo1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  // c_l[i] is lane l of block i = column 4i + l. Transpose the 4 x 16 words into column order:
  // first 4x4 within each 128-bit lane (u_m's lane j = block 4j + m), then 4x4 across lanes.
  const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
  const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
  const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
  const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
  const __m512i v0 = _mm512_shuffle_i32x4(u0, u1, 0x44), v1 = _mm512_shuffle_i32x4(u0, u1, 0xEE);
  const __m512i v2 = _mm512_shuffle_i32x4(u2, u3, 0x44), v3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
  out[0] = _mm512_shuffle_i32x4(v0, v2, 0x88);
  out[1] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
  out[2] = _mm512_shuffle_i32x4(v1, v3, 0x88);
  out[3] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
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
#pragma omp parallel for schedule(static) if (N * C > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    const uint64_t row = static_cast<uint64_t>(coords.global_row(n));
    const T* x = inp + n * C;
    T* o = out + n * C;
    for (int64_t c0 = 0; c0 < C; c0 += 64) {
      __m512i bits[4];
      philox_64(key, row, static_cast<uint64_t>(c0 / 4), bits);
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
void dropout_forward(T* out, const T* inp, PhiloxKey key, TokenCoords coords, int64_t N,
                     int64_t C, float p) {
  apply_dropout(out, inp, key, coords, N, C, p);
}

template <typename T>
void dropout_backward(T* dinp, const T* dout, PhiloxKey key, TokenCoords coords, int64_t N,
                      int64_t C, float p) {
  apply_dropout(dinp, dout, key, coords, N, C, p);
}

template void dropout_forward<float>(float*, const float*, PhiloxKey, TokenCoords, int64_t,
                                     int64_t, float);
template void dropout_forward<bf16>(bf16*, const bf16*, PhiloxKey, TokenCoords, int64_t, int64_t,
                                    float);
template void dropout_backward<float>(float*, const float*, PhiloxKey, TokenCoords, int64_t,
                                      int64_t, float);
template void dropout_backward<bf16>(bf16*, const bf16*, PhiloxKey, TokenCoords, int64_t,
                                     int64_t, float);

}  // namespace tessera::kernels
