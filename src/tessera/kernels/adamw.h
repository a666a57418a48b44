// Fused optimizer steps over flat fp32 master weights (one pass over params, grads and state).
#pragma once

#include <cstdint>

namespace tessera::kernels {

// AdamW (Loshchilov & Hutter, decoupled weight decay), PyTorch's torch.optim.AdamW semantics:
//   g = grad * grad_scale
//   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2
//   master -= lr * (weight_decay * master + (m / (1-beta1^step)) / (sqrt(v / (1-beta2^step)) + eps))
// master, m, v, grad (n) fp32; step is 1-based. param_out (n) or nullptr receives the updated
// master in the compute dtype T (fp32 copy or bf16 rounded), fused into the same pass.
template <typename T>
void adamw_step(float* master, float* m, float* v, T* param_out, const float* grad, int64_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                float grad_scale);

// SGD with momentum (PyTorch semantics, dampening 0, decoupled-free L2 via weight_decay):
//   g = grad * grad_scale + weight_decay * master;  buf = momentum * buf + g (buf = g on step 1)
//   master -= lr * buf
template <typename T>
void sgd_step(float* master, float* momentum_buf, T* param_out, const float* grad, int64_t n,
              float lr, float momentum, float weight_decay, int64_t step, float grad_scale);

// Sum of squares of x (n), accumulated in double for a stable global gradient norm.
double sum_squares(const float* x, int64_t n);
// x *= s.
void scale_inplace(float* x, int64_t n, float s);
// True if any element is NaN or Inf.
bool has_non_finite(const float* x, int64_t n);

}  // namespace tessera::kernels
