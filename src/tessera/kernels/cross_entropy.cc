#include "tessera/kernels/cross_entropy.h"

#include <immintrin.h>

#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "tessera/core/dtype.h"
#include "tessera/kernels/simd.h"
#include "tessera/core/error.h"
#include "tessera/kernels/fast_exp.h"

namespace tessera::kernels {
namespace {

using simd::lane_mask;
using simd::load16;
using simd::store16;

// Lanes [0, min(remaining, 16)).
inline __mmask16 tail_mask(int64_t remaining) { return lane_mask(0, remaining); }

// d[begin, end) = 0.
template <typename T>
void zero_columns(T* d, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; i += 16) store16(d + i, _mm512_setzero_ps(), tail_mask(end - i));
}

template <typename T>
float row_max(const T* x, int64_t V_real) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  // Four independent accumulators hide the vmaxps latency.
  __m512 m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
  int64_t i = 0;
  for (; i + 64 <= V_real; i += 64) {
    m0 = _mm512_max_ps(m0, load16(x + i, 0xffff));
    m1 = _mm512_max_ps(m1, load16(x + i + 16, 0xffff));
    m2 = _mm512_max_ps(m2, load16(x + i + 32, 0xffff));
    m3 = _mm512_max_ps(m3, load16(x + i + 48, 0xffff));
  }
  for (; i < V_real; i += 16) {
    const __mmask16 m = tail_mask(V_real - i);
    m0 = _mm512_mask_max_ps(m0, m, m0, load16(x + i, m));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

// Sum of exp(x - max) over the row; also stores every exp into e when e is not null. e may
// alias x (float rows whose gradient overwrites the logits).
template <typename T>
float row_sum_exp(float* e, const T* x, float max, int64_t V_real) {
  const __m512 vmax = _mm512_set1_ps(max);
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= V_real; i += 32) {
    const __m512 e0 = fast_exp_ps(_mm512_sub_ps(load16(x + i, 0xffff), vmax));
    const __m512 e1 = fast_exp_ps(_mm512_sub_ps(load16(x + i + 16, 0xffff), vmax));
    if (e) {
      _mm512_storeu_ps(e + i, e0);
      _mm512_storeu_ps(e + i + 16, e1);
    }
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  for (; i < V_real; i += 16) {
    const __mmask16 m = tail_mask(V_real - i);
    const __m512 ev = fast_exp_ps(_mm512_sub_ps(load16(x + i, m), vmax));
    if (e) _mm512_mask_storeu_ps(e + i, m, ev);
    s0 = _mm512_mask_add_ps(s0, m, s0, ev);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

// One row: returns the (unmasked) loss and, when d is not null, writes d = coef * e / sum with
// coef subtracted at the target and zeros in the padded columns. `scratch` holds V_real fp32
// values for storage types narrower than fp32.
template <typename T>
float row_forward_backward(T* d, const T* x, int32_t target, float coef, int64_t V, int64_t V_real,
                           float* scratch) {
  // Read the target logit before anything can overwrite the row (d may alias x).
  const float x_target = to_f32(x[target]);
  const float max = row_max(x, V_real);
  float* e = nullptr;
  if (d) {
    if constexpr (std::is_same_v<T, float>) {
      e = d;  // the gradient buffer doubles as the exp buffer: one fewer pass over memory
    } else {
      e = scratch;
    }
  }
  const float sum = row_sum_exp(e, x, max, V_real);
  const float loss = static_cast<float>(std::log(double(sum)) + double(max) - double(x_target));
  if (!d) return loss;

  const float inv = coef / sum;
  // Taken before the scaling pass, which overwrites e when e is d. From the fp32 exp, so the
  // target entry of a bf16 gradient is rounded only once.
  const float d_target = e[target] * inv - coef;
  const __m512 vinv = _mm512_set1_ps(inv);
  int64_t i = 0;
  for (; i + 16 <= V_real; i += 16) {
    store16(d + i, _mm512_mul_ps(_mm512_loadu_ps(e + i), vinv), 0xffff);
  }
  if (i < V_real) {
    const __mmask16 m = tail_mask(V_real - i);
    store16(d + i, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, e + i), vinv), m);
  }
  d[target] = from_f32<T>(d_target);
  zero_columns(d, V_real, V);
  return loss;
}

}  // namespace

template <typename T>
void cross_entropy_forward_backward(float* losses, T* dlogits, const T* logits,
                                    const int32_t* targets, const float* loss_mask, int64_t N,
                                    int64_t V, int64_t V_real, float grad_scale) {
  TESSERA_CHECK(N >= 0 && V_real > 0 && V_real <= V);
  const bool need_scratch = dlogits != nullptr && !std::is_same_v<T, float>;
  // Tiny problems (tests, toy vocabularies) are cheaper on the calling thread than a fork/join.
  constexpr int64_t kParallelThreshold = 1 << 15;
#pragma omp parallel if (N * V >= kParallelThreshold)
  {
    // Per-thread fp32 exp buffer (one vocabulary row, ~200 KB at V = 50304: stays in L2).
    std::unique_ptr<float[]> scratch(need_scratch ? new float[V_real] : nullptr);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float mask = loss_mask ? loss_mask[n] : 1.0f;
      T* d = dlogits ? dlogits + n * V : nullptr;
      if (mask == 0.0f) {
        // Masked rows are not read at all (their logits and target may be anything).
        losses[n] = 0.0f;
        if (d) zero_columns(d, 0, V);
        continue;
      }
      const int32_t target = targets[n];
      TESSERA_CHECK_MSG(target >= 0 && target < V_real, "cross-entropy target out of range");
      const float loss = row_forward_backward(d, logits + n * V, target, mask * grad_scale, V,
                                              V_real, scratch.get());
      losses[n] = mask * loss;
    }
  }
}

template void cross_entropy_forward_backward<float>(float*, float*, const float*, const int32_t*,
                                                    const float*, int64_t, int64_t, int64_t, float);
template void cross_entropy_forward_backward<bf16>(float*, bf16*, const bf16*, const int32_t*,
                                                   const float*, int64_t, int64_t, int64_t, float);
template void cross_entropy_forward_backward<fp16>(float*, fp16*, const fp16*, const int32_t*,
                                                   const float*, int64_t, int64_t, int64_t, float);

}  // namespace tessera::kernels
