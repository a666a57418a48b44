#include "tessera/kernels/activations.h"

#include <immintrin.h>

#include "tessera/core/dtype.h"
#include "tessera/kernels/simd.h"
#include "tessera/core/error.h"
#include "tessera/kernels/fast_exp.h"

namespace tessera::kernels {
namespace {

using simd::lane_mask;
using simd::load16;
using simd::store16;

constexpr int64_t kParallelThreshold = 1 << 14;

// Logistic sigmoid of z without overflow or cancellation: with t = exp(-|z|) in (0, 1],
// sigmoid(z) = 1/(1+t) for z >= 0 and t/(1+t) otherwise, and sigmoid(z)(1 - sigmoid(z)) =
// t/(1+t)^2 for either sign (returned in *slope).
inline __m512 sigmoid(__m512 z, __m512* slope) {
  const __m512 t = fast_exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(z)));
  const __m512 r = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), t));
  const __m512 tr = _mm512_mul_ps(t, r);
  *slope = _mm512_mul_ps(tr, r);
  const __mmask16 nonneg = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mask_mov_ps(tr, nonneg, r);
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// gelu(x) = 0.5 x (1 + tanh(u)) = x s, s = sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3): the
// sigmoid form has no 1 + tanh cancellation for negative x. Returns gelu; *grad = d gelu / dx =
// s + x * 2 s(1-s) * du/dx. Beyond |x| = 1e4, gelu is exactly x or 0 in fp32 with slope 1 or 0;
// clamping x inside u keeps x^2 finite, so the slope term is 0 * finite, not 0 * inf = NaN.
inline __m512 gelu16(__m512 x, __m512* grad) {
  const __m512 xc =
      _mm512_max_ps(_mm512_set1_ps(-1e4f), _mm512_min_ps(_mm512_set1_ps(1e4f), x));  // NaN kept
  const __m512 x2 = _mm512_mul_ps(xc, xc);
  const __m512 k0 = _mm512_set1_ps(kGeluScale);
  const __m512 two_u =
      _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(2.0f * kGeluScale), xc),
                    _mm512_fmadd_ps(_mm512_set1_ps(kGeluCubic), x2, _mm512_set1_ps(1.0f)));
  __m512 slope;
  const __m512 s = sigmoid(two_u, &slope);
  if (grad) {
    const __m512 du = _mm512_mul_ps(
        k0, _mm512_fmadd_ps(_mm512_set1_ps(3.0f * kGeluCubic), x2, _mm512_set1_ps(1.0f)));
    *grad = _mm512_fmadd_ps(_mm512_mul_ps(x, _mm512_add_ps(slope, slope)), du, s);
  }
  return _mm512_mul_ps(x, s);
}

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  TESSERA_CHECK(n >= 0);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lane_mask(i, n);
    store16(out + i, gelu16(load16(inp + i, m), nullptr), m);
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
  TESSERA_CHECK(n >= 0);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lane_mask(i, n);
    __m512 grad;
    gelu16(load16(inp + i, m), &grad);
    store16(dinp + i, _mm512_mul_ps(load16(dout + i, m), grad), m);  // dout read before write
  }
}

template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F) {
  TESSERA_CHECK(N >= 0 && F > 0);
#pragma omp parallel for schedule(static) if (N * F > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    const T* gate = inp + n * 2 * F;
    const T* up = gate + F;
    T* o = out + n * F;
    for (int64_t f = 0; f < F; f += 16) {
      const __mmask16 m = lane_mask(f, F);
      const __m512 g = load16(gate + f, m);
      __m512 slope;
      const __m512 silu = _mm512_mul_ps(g, sigmoid(g, &slope));
      store16(o + f, _mm512_mul_ps(silu, load16(up + f, m)), m);
    }
  }
}

template <typename T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, int64_t N, int64_t F) {
  TESSERA_CHECK(N >= 0 && F > 0);
#pragma omp parallel for schedule(static) if (N * F > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    const T* gate = inp + n * 2 * F;
    const T* up = gate + F;
    const T* dy = dout + n * F;
    T* dgate = dinp + n * 2 * F;
    T* dup = dgate + F;
    for (int64_t f = 0; f < F; f += 16) {
      const __mmask16 m = lane_mask(f, F);
      const __m512 g = load16(gate + f, m);
      const __m512 u = load16(up + f, m);
      const __m512 d = load16(dy + f, m);
      __m512 slope;
      const __m512 sig = sigmoid(g, &slope);
      // d silu / dg = sigmoid + g * sigmoid (1 - sigmoid)
      const __m512 dsilu = _mm512_fmadd_ps(g, slope, sig);
      store16(dgate + f, _mm512_mul_ps(_mm512_mul_ps(d, u), dsilu), m);
      store16(dup + f, _mm512_mul_ps(d, _mm512_mul_ps(g, sig)), m);
    }
  }
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<bf16>(bf16*, const bf16*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<bf16>(bf16*, const bf16*, const bf16*, int64_t);
template void swiglu_forward<float>(float*, const float*, int64_t, int64_t);
template void swiglu_forward<bf16>(bf16*, const bf16*, int64_t, int64_t);
template void swiglu_backward<float>(float*, const float*, const float*, int64_t, int64_t);
template void swiglu_backward<bf16>(bf16*, const bf16*, const bf16*, int64_t, int64_t);
template void gelu_forward<fp16>(fp16*, const fp16*, int64_t);
template void gelu_backward<fp16>(fp16*, const fp16*, const fp16*, int64_t);
template void swiglu_forward<fp16>(fp16*, const fp16*, int64_t, int64_t);
template void swiglu_backward<fp16>(fp16*, const fp16*, const fp16*, int64_t, int64_t);

}  // namespace tessera::kernels
