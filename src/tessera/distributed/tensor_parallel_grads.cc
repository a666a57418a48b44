#include "tessera/distributed/tensor_parallel_grads.h"

#include <string>

#include "tessera/core/error.h"
#include "tessera/kernels/adamw.h"

namespace tessera::distributed {
namespace {

// Appends [offset, offset + length), merging with the previous range when adjacent.
template <typename Range>
void append(std::vector<Range>& ranges, int64_t offset, int64_t length) {
  if (length == 0) return;
  if (!ranges.empty() && ranges.back().offset + ranges.back().length == offset) {
    ranges.back().length += length;
  } else {
    ranges.push_back({offset, length});
  }
}

}  // namespace

TensorParallelGrads::TensorParallelGrads(model::ParameterSet& params, const parallel::TensorParallel& tp)
    : params_(params), tp_(tp) {
  const bool first_rank = tp.rank() == 0;
  for (const model::Parameter& p : params.all()) {
    if (p.shard.tp_dim < 0) {
      if (tp.sequence_parallel()) append(sequence_parallel_, p.offset, p.numel());
      if (first_rank) append(norm_ranges_, p.offset, p.numel());
      continue;
    }
    // A piece along the split dimension is a run of rows of a row-split matrix or of elements
    // of a vector; column-split matrices (row-parallel weights) split whole heads or features.
    const bool column_split = p.shard.tp_dim == 1;
    if (column_split) {
      for (const model::ShardPiece& piece : p.pieces)
        if (piece.replicas > 1) throw Error(p.name + ": replicated column pieces are unsupported");
      append(norm_ranges_, p.offset, p.numel());
      continue;
    }
    const int64_t stride = p.local_shape.size() == 2 ? p.local_shape[1] : 1;
    for (const model::ShardPiece& piece : p.pieces) {
      const int64_t offset = p.offset + piece.local_begin * stride, length = piece.length * stride;
      if (piece.replicas > 1) append(replicated_[piece.replicas], offset, length);
      if (piece.replica_rank == 0) append(norm_ranges_, offset, length);
    }
  }
  // Replica groups: blocks of `replicas` neighbouring TP ranks hold the same pieces.
  for (const auto& [replicas, ranges] : replicated_) {
    std::vector<std::vector<int>> partition(tp.size() / replicas);
    for (int r = 0; r < tp.size(); ++r) partition[r / replicas].push_back(r);
    replica_groups_[replicas] =
        tp.group()->new_subgroups(partition, "tp-replica" + std::to_string(replicas));
  }
}

void TensorParallelGrads::all_reduce_ranges(const std::vector<Range>& ranges,
                                            comm::ProcessGroup& group) {
  int64_t total = 0;
  for (const Range& r : ranges) total += r.length;
  if (total == 0) return;
  float* grads = params_.flat_grads().data<float>();
  Tensor buf = Tensor::empty({total}, DType::kF32, MemoryCategory::kComm);
  float* b = buf.data<float>();
  for (const Range& r : ranges) b = std::copy(grads + r.offset, grads + r.offset + r.length, b);
  group.all_reduce(buf, comm::ReduceOp::kSum).wait();
  const float* src = buf.data<float>();
  for (const Range& r : ranges) {
    std::copy(src, src + r.length, grads + r.offset);
    src += r.length;
  }
}

void TensorParallelGrads::finalize() {
  if (tp_.size() == 1) return;
  if (!sequence_parallel_.empty()) all_reduce_ranges(sequence_parallel_, *tp_.group());
  for (const auto& [replicas, ranges] : replicated_)
    all_reduce_ranges(ranges, *replica_groups_.at(replicas));
}

double TensorParallelGrads::sum_squares() const {
  const float* grads = params_.flat_grads().data<float>();
  double sum = 0;
  for (const Range& r : norm_ranges_) sum += kernels::sum_squares(grads + r.offset, r.length);
  if (tp_.size() == 1) return sum;
  // Every rank's fp64 sum travels as two fp32 words (hi + lo) and all ranks add them up in rank
  // order, so the total is not rounded to fp32 and is bitwise the same on every rank.
  Tensor mine = Tensor::empty({2}, DType::kF32, MemoryCategory::kComm);
  Tensor all = Tensor::empty({2 * tp_.size()}, DType::kF32, MemoryCategory::kComm);
  const float hi = static_cast<float>(sum);
  mine.data<float>()[0] = hi;
  mine.data<float>()[1] = static_cast<float>(sum - hi);
  tp_.group()->all_gather(mine, all).wait();
  const float* v = all.data<float>();
  double total = 0;
  for (int r = 0; r < tp_.size(); ++r) total += double(v[2 * r]) + double(v[2 * r + 1]);
  return total;
}

}  // namespace tessera::distributed
