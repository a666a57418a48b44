// Vectorised fp32 exp for the kernels (softmax, cross-entropy, activations), written once on
// the vector layer and compiled per target.
#pragma once

#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN

// exp(x) on 16 fp32 lanes. Accuracy (tested against the correctly rounded value over
// [-104, 89] on every target): at most 2 ulp for normal results (1 ulp typical); subnormal
// results are rounded once (scale_pow2), so they are off by at most one subnormal ulp.
// x >= 88.73 gives +inf, x <= -103.98 gives +0, -inf gives +0, NaN gives NaN. Pure function.
// Targets differ only where fmadd is fused (AVX2, AVX-512, arm64) or not (x86-64 baseline).
//
// Method (Cephes expf): x = k ln2 + r with k = round(x / ln2) and |r| <= ln2/2, exp(r) by a
// degree-7 polynomial, then exp(x) = exp(r) * 2^k in one rounding step (no intermediate
// overflow at k = 128, correct gradual underflow).
inline VecF fast_exp(VecF x) {
  // Clamp first so k stays in [-150, 129]; max/min return their second operand when it is NaN,
  // so a NaN input is carried through to the result.
  x = max(splat(-104.0f), x);
  x = min(splat(89.0f), x);
  const VecF k = round_small(x * splat(1.44269504088896341f));
  // Two-part ln2 (hi has 12 significant bits, so k*hi is exact for |k| <= 2^12) keeps r
  // accurate to well below an ulp of exp(x).
  VecF r = fnmadd(k, splat(0.693145751953125f), x);
  r = fnmadd(k, splat(1.428606820309417232e-6f), r);
  // exp(r) = 1 + r + r^2 * P(r), minimax P from Cephes expf.
  VecF p = splat(1.9875691500e-4f);
  p = fmadd(p, r, splat(1.3981999507e-3f));
  p = fmadd(p, r, splat(8.3334519073e-3f));
  p = fmadd(p, r, splat(4.1665795894e-2f));
  p = fmadd(p, r, splat(1.6666665459e-1f));
  p = fmadd(p, r, splat(5.0000001201e-1f));
  p = fmadd(p, r * r, r) + splat(1.0f);
  return scale_pow2(p, k);
}

TESSERA_TARGET_END
