#include "tessera/kernels/adamw.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/kernels/simd.h"
#include "tessera/core/error.h"

namespace tessera::kernels {
namespace {

using simd::store16;

// Elements per OpenMP work item. Also the fixed reduction unit of sum_squares: partial sums are
// formed per chunk and combined in chunk order, so the result does not depend on thread count.
constexpr int64_t kChunk = 1 << 16;
// Below this many elements waking the thread team costs more than the pass itself.
constexpr int64_t kParallelThreshold = 1 << 15;

inline int64_t num_chunks(int64_t n) { return (n + kChunk - 1) / kChunk; }

inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? __mmask16(0xffff) : __mmask16((1u << remaining) - 1u);
}

}  // namespace

template <typename T>
void adamw_step(float* master, float* m, float* v, T* param_out, const float* grad, int64_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                float grad_scale) {
  TESSERA_CHECK(step >= 1 && n >= 0);
  // Scalars are formed in double and rounded once to fp32, as PyTorch does with its Python-float
  // hyperparameters before launching the fp32 kernel.
  const double bias_correction1 = 1.0 - std::pow(double(beta1), double(step));
  const double bias_correction2 = 1.0 - std::pow(double(beta2), double(step));
  const __m512 vdecay = _mm512_set1_ps(float(1.0 - double(lr) * double(weight_decay)));
  const __m512 vneg_step = _mm512_set1_ps(float(-(double(lr) / bias_correction1)));
  const __m512 vbc2_sqrt = _mm512_set1_ps(float(std::sqrt(bias_correction2)));
  const __m512 vone_minus_b1 = _mm512_set1_ps(float(1.0 - double(beta1)));
  const __m512 vb2 = _mm512_set1_ps(beta2);
  const __m512 vone_minus_b2 = _mm512_set1_ps(float(1.0 - double(beta2)));
  const __m512 veps = _mm512_set1_ps(eps);
  const __m512 vgs = _mm512_set1_ps(grad_scale);
  const int64_t chunks = num_chunks(n);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; i += 16) {
      const __mmask16 k = tail_mask(end - i);
      // The same sequence of fp32 operations as torch.optim.AdamW's single-tensor path:
      // param.mul_(1 - lr*wd); exp_avg.lerp_(g, 1 - beta1);
      // exp_avg_sq.mul_(beta2).addcmul_(g, g, 1 - beta2);
      // param.addcdiv_(exp_avg, exp_avg_sq.sqrt() / sqrt(bc2) + eps, -lr / bc1).
      const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, grad + i), vgs);
      __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, master + i), vdecay);
      __m512 mv = _mm512_maskz_loadu_ps(k, m + i);
      mv = _mm512_add_ps(mv, _mm512_mul_ps(vone_minus_b1, _mm512_sub_ps(g, mv)));
      __m512 vv = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, v + i), vb2);
      vv = _mm512_add_ps(vv, _mm512_mul_ps(_mm512_mul_ps(vone_minus_b2, g), g));
      const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), vbc2_sqrt), veps);
      p = _mm512_add_ps(p, _mm512_mul_ps(vneg_step, _mm512_div_ps(mv, denom)));
      _mm512_mask_storeu_ps(master + i, k, p);
      _mm512_mask_storeu_ps(m + i, k, mv);
      _mm512_mask_storeu_ps(v + i, k, vv);
      if (param_out) store16(param_out + i, p, k);
    }
  }
}

template <typename T>
void sgd_step(float* master, float* momentum_buf, T* param_out, const float* grad, int64_t n,
              float lr, float momentum, float weight_decay, int64_t step, float grad_scale) {
  TESSERA_CHECK(step >= 1 && n >= 0);
  TESSERA_CHECK_MSG(momentum == 0.0f || momentum_buf != nullptr,
                    "sgd_step: momentum != 0 needs a momentum buffer");
  const bool first = step == 1;
  const __m512 vgs = _mm512_set1_ps(grad_scale);
  const __m512 vwd = _mm512_set1_ps(weight_decay);
  const __m512 vmom = _mm512_set1_ps(momentum);
  const __m512 vneg_lr = _mm512_set1_ps(-lr);
  const int64_t chunks = num_chunks(n);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; i += 16) {
      const __mmask16 k = tail_mask(end - i);
      // torch.optim.SGD order: g = grad.add(param, alpha=wd); buf.mul_(momentum).add_(g);
      // param.add_(buf, alpha=-lr).
      __m512 p = _mm512_maskz_loadu_ps(k, master + i);
      __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, grad + i), vgs);
      g = _mm512_add_ps(g, _mm512_mul_ps(vwd, p));
      if (momentum_buf) {
        if (!first) {
          g = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, momentum_buf + i), vmom), g);
        }
        _mm512_mask_storeu_ps(momentum_buf + i, k, g);
      }
      p = _mm512_add_ps(p, _mm512_mul_ps(vneg_lr, g));
      _mm512_mask_storeu_ps(master + i, k, p);
      if (param_out) store16(param_out + i, p, k);
    }
  }
}

double sum_squares(const float* x, int64_t n) {
  const int64_t chunks = num_chunks(n);
  std::vector<double> partial(chunks);
  // x^2 accumulated into 8 double lanes; four independent chains so the loop streams at memory
  // speed instead of waiting on FMA latency.
  const auto acc = [](__m256 v, __m512d a) {
    const __m512d d = _mm512_cvtps_pd(v);
    return _mm512_fmadd_pd(d, d, a);
  };
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = c * kChunk;
    for (; i + 32 <= end; i += 32) {
      a0 = acc(_mm256_loadu_ps(x + i), a0);
      a1 = acc(_mm256_loadu_ps(x + i + 8), a1);
      a2 = acc(_mm256_loadu_ps(x + i + 16), a2);
      a3 = acc(_mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i < end; i += 8) {
      const int64_t r = end - i;
      a0 =
          acc(_mm256_maskz_loadu_ps(r >= 8 ? __mmask8(0xff) : __mmask8((1u << r) - 1u), x + i), a0);
    }
    partial[c] = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
  }
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

void scale_inplace(float* x, int64_t n, float s) {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

bool has_non_finite(const float* x, int64_t n) {
  const int64_t chunks = num_chunks(n);
  // vfpclassps categories: QNaN (0x01), +Inf (0x08), -Inf (0x10), SNaN (0x80).
  constexpr int kNonFinite = 0x01 | 0x08 | 0x10 | 0x80;
  unsigned found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    __mmask16 any = 0;
    for (int64_t i = c * kChunk; i < end; i += 16) {
      const __mmask16 k = tail_mask(end - i);
      any |= _mm512_mask_fpclass_ps_mask(k, _mm512_maskz_loadu_ps(k, x + i), kNonFinite);
    }
    found |= any;
  }
  return found != 0;
}

template void adamw_step<float>(float*, float*, float*, float*, const float*, int64_t, float, float,
                                float, float, float, int64_t, float);
template void adamw_step<bf16>(float*, float*, float*, bf16*, const float*, int64_t, float, float,
                               float, float, float, int64_t, float);
template void sgd_step<float>(float*, float*, float*, const float*, int64_t, float, float, float,
                              int64_t, float);
template void sgd_step<bf16>(float*, float*, bf16*, const float*, int64_t, float, float, float,
                             int64_t, float);
template void adamw_step<fp16>(float*, float*, float*, fp16*, const float*, int64_t, float, float,
                               float, float, float, int64_t, float);
template void sgd_step<fp16>(float*, float*, fp16*, const float*, int64_t, float, float, float,
                             int64_t, float);

}  // namespace tessera::kernels
