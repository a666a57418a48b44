// The tensor-parallel group a model runs in, and the four points where a TP layer talks to it.
//
// Megatron's scheme: a column-parallel linear takes the full input and produces its ranks'
// slice of the output features; a row-parallel linear takes a slice of the input features and
// produces a partial sum of the full output. Between the two, nothing is communicated. Around
// them (Megatron-LM v3 with --sequence-parallel, the activations outside the column/row pair
// are split along the sequence instead of replicated):
//
//   point                       without SP                    with SP
//   column_input_forward        identity                      all-gather the sequence
//   column_input_backward       all-reduce dx                 reduce-scatter dx
//   row_output_forward          all-reduce y                  reduce-scatter y
//   row_output_backward         identity                      all-gather dy
//
// Tensors are a layer's (B * S, C) activations, B samples of S tokens (S the local slice under
// SP, the full sequence otherwise). With size 1 every point is the identity and no group is
// needed (single-process runs never touch MPI). The calls are synchronous collectives over
// `group`: every member calls them at the same points with equal shapes.
#pragma once

#include <memory>

#include "tessera/comm/process_group.h"
#include "tessera/core/tensor.h"
#include "tessera/parallel/mappings.h"

namespace tessera::parallel {

class TensorParallel {
 public:
  // One process: size 1, no group.
  TensorParallel() = default;
  // The members of `group` (nullptr: size 1). sequence_parallel is ignored at size 1. `sums`: how
  // the points' all-reduces and reduce-scatters sum 16-bit activations (parallel/mappings.h).
  TensorParallel(std::shared_ptr<comm::ProcessGroup> group, bool sequence_parallel,
                 SixteenBitSums sums = SixteenBitSums::kInFp32);

  int size() const { return size_; }
  int rank() const { return rank_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  SixteenBitSums sixteen_bit_sums() const { return sums_; }
  const std::shared_ptr<comm::ProcessGroup>& group() const { return group_; }
  // The [begin, begin + length) tokens of each sample this rank's residual stream holds.
  int64_t seq_begin(int64_t seq_length) const;
  int64_t seq_local(int64_t seq_length) const;

  // Also in a column layer's backward under SP, to gather again the rows it kept (Megatron-Core's
  // LinearWithGradAccumulationAndAsyncCommunication: model/parallel_linear.h).
  Tensor column_input_forward(const Tensor& x, int64_t batch) const;
  Tensor column_input_backward(Tensor dx, int64_t batch) const;
  Tensor row_output_forward(Tensor y, int64_t batch) const;
  Tensor row_output_backward(const Tensor& dy, int64_t batch) const;

  // Wall time spent inside the calls above (issue to completion), for benchmarks' comm share.
  double comm_seconds() const { return comm_seconds_; }
  void reset_comm_seconds() { comm_seconds_ = 0; }

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
  int size_ = 1, rank_ = 0;
  bool sequence_parallel_ = false;
  SixteenBitSums sums_ = SixteenBitSums::kInFp32;
  mutable double comm_seconds_ = 0;
};

}  // namespace tessera::parallel
