// Vocab-parallel softmax cross-entropy (Megatron-Core's tensor_parallel/cross_entropy.py): loss and
// dlogits over logits split along the vocabulary across the tensor-parallel group, without ever
// gathering the full logits. A call costs exactly three all-reduces of N fp32 values each (none
// when the group has one member): MAX of the local row maxima, SUM of the target logit (owned
// by one rank), SUM of the local exp-sums. The math is kernels::cross_entropy_forward_backward's
// on the full logits.
#pragma once

#include <cstdint>

#include "tessera/comm/process_group.h"

namespace tessera::parallel {

// This rank holds columns [vocab_start, vocab_start + V_local) of the padded vocabulary V (the
// output layer's rows of this rank); only global columns < V_real are real vocabulary, padded
// columns get probability 0 and gradient 0, so padding (which depends on the TP size) never
// changes the math. A rank whose columns are all padding is allowed.
//   logits (N, V_local); targets (N) global ids in [0, V_real); loss_mask (N) or nullptr (all
//   ones). losses (N) fp32 = mask * -log softmax(full logits)[target], identical on every rank.
//   dlogits (N, V_local) or nullptr: this rank's columns of
//       mask * grad_scale * (softmax - onehot(target)); padded columns 0.
//   dlogits may alias logits (the logits buffer becomes its gradient).
// Rows with mask 0 are not read (logits and target may be anything): loss 0, dlogits row 0.
// Collective over `tp`: every member calls it with the same N, V_real, mask and targets, its own
// vocab_start/V_local (the ranges of the members tile [0, V) in any order). A target outside
// [0, V_real) on an unmasked row is a bug (checked). Arithmetic in fp32 (the final log in double,
// as the kernel). T is float, bf16 or fp16. Temporary buffers: 3 * N fp32 in MemoryCategory::kComm.
template <typename T>
void vocab_parallel_cross_entropy_forward_backward(float* losses, T* dlogits, const T* logits,
                                                   const int32_t* targets, const float* loss_mask,
                                                   int64_t N, int64_t vocab_start, int64_t V_local,
                                                   int64_t V_real, float grad_scale,
                                                   comm::ProcessGroup& tp);

}  // namespace tessera::parallel
