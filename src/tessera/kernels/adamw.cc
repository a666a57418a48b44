// Optimizer kernels (contract in adamw.h), compiled once per CPU target.
#include "tessera/kernels/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

// Elements per OpenMP work item. Also the fixed reduction unit of sum_squares: partial sums are
// formed per chunk and combined in chunk order, so the result does not depend on thread count.
constexpr int64_t kChunk = 1 << 16;
// Below this many elements waking the thread team costs more than the pass itself.
constexpr int64_t kParallelThreshold = 1 << 15;

inline int64_t num_chunks(int64_t n) { return (n + kChunk - 1) / kChunk; }

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
  const VecF decay = splat(float(1.0 - double(lr) * double(weight_decay)));
  const VecF neg_step = splat(float(-(double(lr) / bias_correction1)));
  const VecF bc2_sqrt = splat(float(std::sqrt(bias_correction2)));
  const VecF one_minus_b1 = splat(float(1.0 - double(beta1)));
  const VecF b2 = splat(beta2);
  const VecF one_minus_b2 = splat(float(1.0 - double(beta2)));
  const VecF veps = splat(eps);
  const VecF gs = splat(grad_scale);
  const int64_t chunks = num_chunks(n);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    for_each_block(c * kChunk, std::min(n, (c + 1) * kChunk), [&](int64_t i, int lanes) {
      // The same sequence of fp32 operations as torch.optim.AdamW's single-tensor path (each
      // product rounded before the sum: no fused multiply-add):
      // param.mul_(1 - lr*wd); exp_avg.lerp_(g, 1 - beta1);
      // exp_avg_sq.mul_(beta2).addcmul_(g, g, 1 - beta2);
      // param.addcdiv_(exp_avg, exp_avg_sq.sqrt() / sqrt(bc2) + eps, -lr / bc1).
      const VecF g = load(grad + i, lanes) * gs;
      VecF p = load(master + i, lanes) * decay;
      VecF mv = load(m + i, lanes);
      mv = mv + one_minus_b1 * (g - mv);
      VecF vv = load(v + i, lanes) * b2;
      vv = vv + (one_minus_b2 * g) * g;
      const VecF denom = sqrt(vv) / bc2_sqrt + veps;
      p = p + neg_step * (mv / denom);
      store(master + i, p, lanes);
      store(m + i, mv, lanes);
      store(v + i, vv, lanes);
      if (param_out) store(param_out + i, p, lanes);
    });
  }
}

template <typename T>
void sgd_step(float* master, float* momentum_buf, T* param_out, const float* grad, int64_t n,
              float lr, float momentum, float weight_decay, int64_t step, float grad_scale) {
  TESSERA_CHECK(step >= 1 && n >= 0);
  TESSERA_CHECK_MSG(momentum == 0.0f || momentum_buf != nullptr,
                    "sgd_step: momentum != 0 needs a momentum buffer");
  const bool first = step == 1;
  const VecF gs = splat(grad_scale);
  const VecF wd = splat(weight_decay);
  const VecF mom = splat(momentum);
  const VecF neg_lr = splat(-lr);
  const int64_t chunks = num_chunks(n);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    for_each_block(c * kChunk, std::min(n, (c + 1) * kChunk), [&](int64_t i, int lanes) {
      // torch.optim.SGD order: g = grad.add(param, alpha=wd); buf.mul_(momentum).add_(g);
      // param.add_(buf, alpha=-lr). No fused multiply-add.
      VecF p = load(master + i, lanes);
      VecF g = load(grad + i, lanes) * gs;
      g = g + wd * p;
      if (momentum_buf) {
        if (!first) g = load(momentum_buf + i, lanes) * mom + g;
        store(momentum_buf + i, g, lanes);
      }
      p = p + neg_lr * g;
      store(master + i, p, lanes);
      if (param_out) store(param_out + i, p, lanes);
    });
  }
}

double sum_squares(const float* x, int64_t n) {
  const int64_t chunks = num_chunks(n);
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    // x^2 in fp64 (exact), summed into two accumulators of 16 fp64 lanes: independent chains
    // (four zmm on AVX-512, eight ymm on AVX2) so the loop streams at memory speed instead of
    // waiting on the adds' latency. The layout is the same on every target, so is the result.
    VecD a0 = zero_d(), a1 = zero_d();
    int64_t i = c * kChunk;
    for (; i + 2 * kLanes <= end; i += 2 * kLanes) {
      a0 = add_squares(a0, load(x + i));
      a1 = add_squares(a1, load(x + i + kLanes));
    }
    for (; i < end; i += kLanes) a0 = add_squares(a0, load(x + i, lanes_left(i, end)));
    partial[c] = reduce_add(a0 + a1);
  }
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

void scale_inplace(float* x, int64_t n, float s) {
  const VecF vs = splat(s);
  const int64_t chunks = num_chunks(n);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    for_each_block(c * kChunk, std::min(n, (c + 1) * kChunk), [&](int64_t i, int lanes) {
      store(x + i, load(x + i, lanes) * vs, lanes);
    });
  }
}

bool has_non_finite(const float* x, int64_t n) {
  const int64_t chunks = num_chunks(n);
  uint32_t found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    // Lanes past the end load as 0, which is finite.
    Mask any_lane = first_n(0);
    for_each_block(c * kChunk, std::min(n, (c + 1) * kChunk), [&](int64_t i, int lanes) {
      any_lane = any_lane | non_finite(load(x + i, lanes));
    });
    found |= to_bits(any_lane);
  }
  return found != 0;
}

void register_adamw() {
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::adamw_step<T>>(kThisTarget, &adamw_step<T>);
    register_kernel<&kernels::sgd_step<T>>(kThisTarget, &sgd_step<T>);
  });
  register_kernel<&kernels::sum_squares>(kThisTarget, &sum_squares);
  register_kernel<&kernels::scale_inplace>(kThisTarget, &scale_inplace);
  register_kernel<&kernels::has_non_finite>(kThisTarget, &has_non_finite);
}

TESSERA_TARGET_END
