#include "tessera/parallel/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor.h"
#include "tessera/kernels/cross_entropy.h"

namespace tessera::parallel {
template <typename T>
void vocab_parallel_cross_entropy_forward_backward(float* losses, T* dlogits, const T* logits,
                                                   const int32_t* targets, const float* loss_mask,
                                                   int64_t N, int64_t vocab_start, int64_t V_local,
                                                   int64_t V_real, float grad_scale,
                                                   comm::ProcessGroup& tp) {
  TESSERA_CHECK(N >= 0 && vocab_start >= 0 && V_local >= 0 && V_real > 0);
  if (N == 0) return;  // N is the same on every member, so all of them skip the collectives
  // Columns [0, R) of this shard are real vocabulary, [R, V_local) padding.
  const int64_t R = std::clamp<int64_t>(V_real - vocab_start, 0, V_local);
  const auto masked = [&](int64_t n) { return loss_mask && loss_mask[n] == 0.0f; };

  Tensor max_t = Tensor::empty({N}, DType::kF32, MemoryCategory::kComm);
  Tensor target_t = Tensor::empty({N}, DType::kF32, MemoryCategory::kComm);
  Tensor sum_t = Tensor::empty({N}, DType::kF32, MemoryCategory::kComm);
  float* row_max = max_t.data<float>();
  float* x_target = target_t.data<float>();
  float* sum_exp = sum_t.data<float>();

  // Pass 1: local row max over the real columns (-inf on an all-padding shard; the vectorised
  // row passes are the single-rank kernel's, kernels/cross_entropy.h) and the target logit if
  // this shard owns it (0 otherwise, so the SUM over ranks is exactly that logit). Masked rows
  // contribute finite placeholders and are never read afterwards.
  kernels::cross_entropy_shard_max(row_max, logits, loss_mask, N, V_local, R);
  for (int64_t n = 0; n < N; ++n) {
    x_target[n] = 0.0f;
    if (masked(n)) continue;
    const int64_t target = targets[n];
    TESSERA_CHECK_MSG(target >= 0 && target < V_real, "cross-entropy target out of range");
    if (target >= vocab_start && target < vocab_start + R)
      x_target[n] = to_f32(logits[n * V_local + target - vocab_start]);
  }
  // The target SUM is not needed until the end: it travels while the exp-sums are computed.
  comm::Work max_work, target_work;
  if (tp.size() > 1) {
    max_work = tp.all_reduce(max_t, comm::ReduceOp::kMax);
    target_work = tp.all_reduce(target_t, comm::ReduceOp::kSum);
  }
  max_work.wait();

  // Pass 2: local sum of exp(x - global max) over the real columns.
  kernels::cross_entropy_shard_sum_exp(sum_exp, logits, row_max, loss_mask, N, V_local, R);
  if (tp.size() > 1) tp.all_reduce(sum_t, comm::ReduceOp::kSum).wait();
  target_work.wait();

  // Pass 3: losses and this shard's gradient, exp recomputed rather than stored so that dlogits
  // may alias logits without a scratch row.
  std::vector<float> scale(static_cast<size_t>(N), 0.0f), coef(static_cast<size_t>(N), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    if (masked(n)) {
      losses[n] = 0.0f;
      continue;
    }
    const float mask = loss_mask ? loss_mask[n] : 1.0f;
    const float m = row_max[n], sum = sum_exp[n];
    const float loss = static_cast<float>(std::log(double(sum)) + double(m) - double(x_target[n]));
    losses[n] = mask * loss;
    coef[n] = mask * grad_scale;
    scale[n] = coef[n] / sum;
  }
  if (dlogits)
    kernels::cross_entropy_shard_gradient(dlogits, logits, row_max, scale.data(), coef.data(),
                                          targets, vocab_start, loss_mask, N, V_local, R);
}

template void vocab_parallel_cross_entropy_forward_backward<float>(float*, float*, const float*,
                                                                   const int32_t*, const float*,
                                                                   int64_t, int64_t, int64_t,
                                                                   int64_t, float,
                                                                   comm::ProcessGroup&);
template void vocab_parallel_cross_entropy_forward_backward<bf16>(float*, bf16*, const bf16*,
                                                                  const int32_t*, const float*,
                                                                  int64_t, int64_t, int64_t,
                                                                  int64_t, float,
                                                                  comm::ProcessGroup&);
template void vocab_parallel_cross_entropy_forward_backward<fp16>(float*, fp16*, const fp16*,
                                                                  const int32_t*, const float*,
                                                                  int64_t, int64_t, int64_t,
                                                                  int64_t, float,
                                                                  comm::ProcessGroup&);

}  // namespace tessera::parallel
