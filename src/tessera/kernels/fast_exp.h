// Vectorised fp32 exp for AVX-512 kernels (softmax, cross-entropy, activations).
#pragma once

#include <immintrin.h>

namespace tessera::kernels {

// exp(x) on 16 fp32 lanes. Accuracy (tested against the correctly rounded value over
// [-104, 89]): at most 2 ulp for normal results (1 ulp typical); subnormal results are rounded
// once by vscalefps, so they are off by at most one subnormal ulp. x >= 88.73 gives +inf,
// x <= -103.98 gives +0, -inf gives +0, NaN gives NaN. Pure function, no state.
//
// Method (Cephes expf): x = k ln2 + r with k = round(x / ln2) and |r| <= ln2/2, exp(r) by a
// degree-7 polynomial, then exp(x) = exp(r) * 2^k by vscalefps, which applies the power of two
// in one rounding step (no intermediate overflow at k = 128, correct gradual underflow).
inline __m512 fast_exp_ps(__m512 x) {
  // Clamp first so k stays in [-150, 129]; max/min return their second operand when it is NaN,
  // so a NaN input is carried through to the result.
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // Two-part ln2 (hi has 12 significant bits, so k*hi is exact for |k| <= 2^12) keeps r
  // accurate to well below an ulp of exp(x).
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606820309417232e-6f), r);
  // exp(r) = 1 + r + r^2 * P(r), minimax P from Cephes expf.
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, k);
}

}  // namespace tessera::kernels
