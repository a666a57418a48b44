// Fused softmax cross-entropy: loss and dlogits in one pass over the logits.
#pragma once

#include <cstdint>

#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

// logits (N, V) with V >= V_real: only the first V_real columns are real vocabulary; padded
// columns get probability 0 and gradient 0, so padding never changes the math.
// targets (N) in [0, V_real); loss_mask (N) or nullptr (all ones).
// losses (N) fp32 = mask * -log softmax(logits)[target].
// dlogits (N, V) or nullptr: mask * grad_scale * (softmax - onehot(target)); padded columns 0.
// dlogits may alias logits (the usual case: the logits buffer becomes its gradient).
// Per row: a pass for the max, one for the sum of exp(x - max) (fast_exp.h; the exps are kept in
// dlogits, or in an fp32 scratch row for 16-bit types) and one writing the gradient. CPU targets
// differ only in the last bits, where fast_exp fuses its multiply-adds (or, on x86-64 baseline,
// cannot), and in bf16 gradients below the fp32 normal range, which the AVX-512-bf16 target
// rounds to signed zeros (simd/vec_avx512.h).
template <typename T>
void cross_entropy_forward_backward(float* losses, T* dlogits, const T* logits,
                                    const int32_t* targets, const float* loss_mask, int64_t N,
                                    int64_t V, int64_t V_real, float grad_scale) {
  dispatch<&cross_entropy_forward_backward<T>>(losses, dlogits, logits, targets, loss_mask, N, V,
                                               V_real, grad_scale);
}

// The passes of a cross-entropy whose vocabulary is split over ranks
// (parallel/vocab_parallel_cross_entropy.h), which reduces the row maxima and sums between them:
// each over N rows of V_local columns, of which the first R are real vocabulary. A row whose
// loss_mask (nullptr: none) is 0 is never read.
// row_max (N): the maximum over the R real columns (-inf when R is 0; 0 for a masked row).
template <typename T>
void cross_entropy_shard_max(float* row_max, const T* logits, const float* loss_mask, int64_t N,
                             int64_t V_local, int64_t R) {
  dispatch<&cross_entropy_shard_max<T>>(row_max, logits, loss_mask, N, V_local, R);
}
// sum_exp (N): the sum of exp(x - max[n]) over the R real columns (fast_exp.h; 0 for a masked row).
template <typename T>
void cross_entropy_shard_sum_exp(float* sum_exp, const T* logits, const float* max,
                                 const float* loss_mask, int64_t N, int64_t V_local, int64_t R) {
  dispatch<&cross_entropy_shard_sum_exp<T>>(sum_exp, logits, max, loss_mask, N, V_local, R);
}
// dlogits (N, V_local) = exp(x - max[n]) * scale[n] in the real columns, minus coef[n] at the
// row's target when this shard holds it (targets[n] - vocab_start in [0, R); the target entry
// rounded once, from fp32), 0 in the padded columns and in masked rows. dlogits may alias logits.
template <typename T>
void cross_entropy_shard_gradient(T* dlogits, const T* logits, const float* max, const float* scale,
                                  const float* coef, const int32_t* targets, int64_t vocab_start,
                                  const float* loss_mask, int64_t N, int64_t V_local, int64_t R) {
  dispatch<&cross_entropy_shard_gradient<T>>(dlogits, logits, max, scale, coef, targets,
                                             vocab_start, loss_mask, N, V_local, R);
}

}  // namespace tessera::kernels
