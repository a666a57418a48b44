#include "tessera/parallel/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::parallel {
namespace {

// Below this many local logits a fork/join costs more than the loops (tests, toy vocabularies).
constexpr int64_t kParallelThreshold = 1 << 15;

}  // namespace

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
  const bool parallel = N * V_local >= kParallelThreshold;

  Tensor max_t = Tensor::empty({N}, DType::kF32, MemoryCategory::kComm);
  Tensor target_t = Tensor::empty({N}, DType::kF32, MemoryCategory::kComm);
  Tensor sum_t = Tensor::empty({N}, DType::kF32, MemoryCategory::kComm);
  float* row_max = max_t.data<float>();
  float* x_target = target_t.data<float>();
  float* sum_exp = sum_t.data<float>();

  // Pass 1: local row max over the real columns (-inf on an all-padding shard) and the target
  // logit if this shard owns it (0 otherwise, so the SUM over ranks is exactly that logit).
  // Masked rows contribute finite placeholders and are never read afterwards.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t n = 0; n < N; ++n) {
    const bool masked = loss_mask && loss_mask[n] == 0.0f;
    float m = masked ? 0.0f : -std::numeric_limits<float>::infinity();
    float t = 0.0f;
    if (!masked) {
      const T* x = logits + n * V_local;
      for (int64_t i = 0; i < R; ++i) m = std::max(m, to_f32(x[i]));
      const int64_t target = targets[n];
      TESSERA_CHECK_MSG(target >= 0 && target < V_real, "cross-entropy target out of range");
      if (target >= vocab_start && target < vocab_start + R) t = to_f32(x[target - vocab_start]);
    }
    row_max[n] = m;
    x_target[n] = t;
  }
  // The target SUM is not needed until the end: it travels while the exp-sums are computed.
  comm::Work max_work, target_work;
  if (tp.size() > 1) {
    max_work = tp.all_reduce(max_t, comm::ReduceOp::kMax);
    target_work = tp.all_reduce(target_t, comm::ReduceOp::kSum);
  }
  max_work.wait();

  // Pass 2: local sum of exp(x - global max) over the real columns.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t n = 0; n < N; ++n) {
    float s = 0.0f;
    if (!(loss_mask && loss_mask[n] == 0.0f)) {
      const T* x = logits + n * V_local;
      const float m = row_max[n];
      for (int64_t i = 0; i < R; ++i) s += std::exp(to_f32(x[i]) - m);
    }
    sum_exp[n] = s;
  }
  if (tp.size() > 1) tp.all_reduce(sum_t, comm::ReduceOp::kSum).wait();
  target_work.wait();

  // Pass 3: losses and this shard's gradient. exp is recomputed rather than stored so that
  // dlogits may alias logits without a scratch row: each element is read before it is written.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t n = 0; n < N; ++n) {
    const float mask = loss_mask ? loss_mask[n] : 1.0f;
    T* d = dlogits ? dlogits + n * V_local : nullptr;
    if (mask == 0.0f) {
      losses[n] = 0.0f;
      if (d) std::fill(d, d + V_local, from_f32<T>(0.0f));
      continue;
    }
    const float m = row_max[n], sum = sum_exp[n];
    const float loss = static_cast<float>(std::log(double(sum)) + double(m) - double(x_target[n]));
    losses[n] = mask * loss;
    if (!d) continue;
    const T* x = logits + n * V_local;
    const float coef = mask * grad_scale;
    const float inv = coef / sum;
    const int64_t local_target = targets[n] - vocab_start;
    const bool owns_target = local_target >= 0 && local_target < R;
    // From the fp32 exp before the row is overwritten, so a bf16 target entry is rounded once.
    const float d_target = owns_target ? std::exp(to_f32(x[local_target]) - m) * inv - coef : 0.0f;
    for (int64_t i = 0; i < R; ++i) d[i] = from_f32<T>(std::exp(to_f32(x[i]) - m) * inv);
    if (owns_target) d[local_target] = from_f32<T>(d_target);
    std::fill(d + R, d + V_local, from_f32<T>(0.0f));
  }
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
