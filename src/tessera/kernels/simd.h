// AVX-512 helpers shared by the CPU kernels: 16-lane loads and stores of any storage type as
// fp32 registers, and the mask of the lanes that remain in a row.
//
// Kernels process a row 16 lanes at a time and mask the last block instead of running a scalar
// tail, so an element goes through the same vector arithmetic wherever it sits: a
// tensor-parallel shard of a row gives the same bits as the whole row.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::kernels::simd {

// Lanes [i, min(i + 16, n)) of a row of n elements.
inline __mmask16 lane_mask(int64_t i, int64_t n) {
  const int64_t left = n - i;
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// Masked loads widen to fp32 (masked-off lanes read as 0 and touch no memory).
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const bf16* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 load16(const fp16* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

// Masked stores round from fp32 to nearest even (as bf16::from_float and fp16(float) do).
inline void store16(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
inline void store16(bf16* p, __m512 v, __mmask16 m) {
  __m256bh h = _mm512_cvtneps_pbh(v);
  _mm256_mask_storeu_epi16(p, m, reinterpret_cast<__m256i&>(h));
}
inline void store16(fp16* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

}  // namespace tessera::kernels::simd
