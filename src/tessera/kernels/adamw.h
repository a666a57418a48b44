// Fused optimizer steps over flat fp32 master weights (one pass over params, grads and state).
#pragma once

#include <cstdint>

#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

// AdamW (Loshchilov & Hutter, decoupled weight decay), PyTorch's torch.optim.AdamW semantics:
//   g = grad * grad_scale
//   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2
//   master -= lr * (weight_decay * master + (m / (1-beta1^step)) / (sqrt(v / (1-beta2^step)) + eps))
// master, m, v, grad (n) fp32; step is 1-based. param_out (n) or nullptr receives the updated
// master in the compute dtype T (fp32 copy, or bf16 / fp16 rounded to nearest even), fused into
// the same pass. The fp32 arithmetic is torch.optim.AdamW's single-tensor sequence, each product
// rounded before its sum (no fused multiply-add), so every CPU target gives the same bits (but
// in a bf16 param_out the AVX-512-bf16 target rounds fp32 subnormals to signed zeros:
// simd/vec_avx512.h).
template <typename T>
void adamw_step(float* master, float* m, float* v, T* param_out, const float* grad, int64_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                float grad_scale) {
  dispatch<&adamw_step<T>>(master, m, v, param_out, grad, n, lr, beta1, beta2, eps, weight_decay,
                           step, grad_scale);
}

// SGD with momentum (PyTorch semantics, dampening 0, decoupled-free L2 via weight_decay):
//   g = grad * grad_scale + weight_decay * master;  buf = momentum * buf + g (buf = g on step 1)
//   master -= lr * buf
// Same operation order on every CPU target, no fused multiply-add.
template <typename T>
void sgd_step(float* master, float* momentum_buf, T* param_out, const float* grad, int64_t n,
              float lr, float momentum, float weight_decay, int64_t step, float grad_scale) {
  dispatch<&sgd_step<T>>(master, momentum_buf, param_out, grad, n, lr, momentum, weight_decay,
                         step, grad_scale);
}

// Sum of squares of x (n), accumulated in double for a stable global gradient norm. Summed in
// fixed chunks combined in order, so the result does not depend on the thread count (nor on the
// CPU target).
inline double sum_squares(const float* x, int64_t n) { return dispatch<&sum_squares>(x, n); }
// x *= s.
inline void scale_inplace(float* x, int64_t n, float s) { dispatch<&scale_inplace>(x, n, s); }
// True if any element is NaN or Inf.
inline bool has_non_finite(const float* x, int64_t n) { return dispatch<&has_non_finite>(x, n); }

}  // namespace tessera::kernels
