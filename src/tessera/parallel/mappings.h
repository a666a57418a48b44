// Tensor- and sequence-parallel region mappings (Megatron-Core's tensor_parallel/mappings.py),
// written as explicit forward/backward pairs: the caller runs the forward in its layer's forward
// and the matching backward in its layer's backward, so every collective of a TP layer is visible
// at its call site (no autograd).
//
//   mapping                                   forward               backward
//   copy_to_tp_region                         identity              all-reduce SUM
//   reduce_from_tp_region                     all-reduce SUM        identity
//   gather_from_sequence_parallel_region      all-gather dim 0      reduce-scatter SUM dim 0
//   reduce_scatter_to_sequence_parallel_region reduce-scatter dim 0 all-gather dim 0
//
// Common contract:
//  - `tp` is the tensor-parallel group (ParallelState::group(GroupKind::kTensor)). Every member
//    calls the same mapping at the same point with tensors of the same shape and dtype (they are
//    collectives). With a group of size 1 no collective is issued: the all-reduces leave the
//    tensor as it is and the gather/scatter mappings return a copy of their input.
//  - Tensors are fp32, bf16 or fp16. 16-bit sums accumulate in fp32 and are rounded once
//    (comm/process_group.h), unless the caller asks for SixteenBitSums::kInOwnType: then they are
//    sent and summed in the tensor's own type, as Megatron's are (half the bytes; each partial sum
//    rounded).
//  - The sequence-parallel mappings see their tensor's rows as (batch, S, ...): `batch` samples
//    of S tokens each (Tessera's activations are (B, T, C), batch first). Member r holds tokens
//    [r * S/n, (r+1) * S/n) of every sample, i.e. a (batch, S/n, ...) tensor; the gathered tensor
//    is (batch, S, ...) in token order. With batch 1 this is Megatron's split of dim 0 of its
//    [s, b, h] layout; with batch > 1 the blocks are interleaved per sample (one extra copy of
//    the gathered or scattered tensor). A tensor with no dims, rows not divisible by `batch`, or
//    S not divisible by the group size throws tessera::Error naming the mapping and the sizes.
//  - In-place mappings (the all-reduces) overwrite the given tensor's storage and return the same
//    handle; the gather/scatter mappings return a new tensor in the input's memory category.
//  - All calls are synchronous today (they issue the collective and wait on its Work).
//  - Not thread-safe with respect to other collectives issued on the same group from other
//    threads (their order would decide the matching; see ProcessGroup).
#pragma once

#include "tessera/comm/process_group.h"
#include "tessera/core/tensor.h"

namespace tessera::parallel {

// How the reducing mappings sum a 16-bit tensor (fp32 tensors are summed in fp32 either way).
enum class SixteenBitSums {
  kInFp32,     // widened, summed in fp32, rounded once: a TP layout reproduces one process's sums
  kInOwnType,  // sent and summed in bf16/fp16 (Megatron's; --tp-reduce-in-16-bit)
};

// Forward: x is the replicated input of a column-parallel region; returned as is.
inline Tensor copy_to_tp_region_forward(const Tensor& x, comm::ProcessGroup& /*tp*/) { return x; }
// Backward: dx holds this rank's partial input gradient; all-reduced (SUM) in place.
Tensor copy_to_tp_region_backward(Tensor dx, comm::ProcessGroup& tp,
                                  SixteenBitSums sums = SixteenBitSums::kInFp32);

// Forward: y holds this rank's partial output of a row-parallel region; all-reduced in place.
Tensor reduce_from_tp_region_forward(Tensor y, comm::ProcessGroup& tp,
                                     SixteenBitSums sums = SixteenBitSums::kInFp32);
// Backward: dy is already the full (replicated) gradient; returned as is.
inline Tensor reduce_from_tp_region_backward(const Tensor& dy, comm::ProcessGroup& /*tp*/) {
  return dy;
}

// Forward: x (batch, S/n, ...) is this rank's sequence slice; returns the full (batch, S, ...)
// tensor, the slices in rank order within each sample.
Tensor gather_from_sequence_parallel_region_forward(const Tensor& x, comm::ProcessGroup& tp,
                                                    int64_t batch = 1);
// Backward: dy (batch, S, ...) is this rank's partial gradient of the gathered tensor; returns
// (batch, S/n, ...) = rank's slice of the sum over ranks.
Tensor gather_from_sequence_parallel_region_backward(const Tensor& dy, comm::ProcessGroup& tp,
                                                     int64_t batch = 1,
                                                     SixteenBitSums sums = SixteenBitSums::kInFp32);

// Forward: y (batch, S, ...) is this rank's partial output; returns (batch, S/n, ...) = rank's
// slice of the sum.
Tensor reduce_scatter_to_sequence_parallel_region_forward(
    const Tensor& y, comm::ProcessGroup& tp, int64_t batch = 1,
    SixteenBitSums sums = SixteenBitSums::kInFp32);
// Backward: dy (batch, S/n, ...) is the gradient of this rank's slice; returns the full
// (batch, S, ...) gradient.
Tensor reduce_scatter_to_sequence_parallel_region_backward(const Tensor& dy,
                                                           comm::ProcessGroup& tp,
                                                           int64_t batch = 1);

}  // namespace tessera::parallel
