#include "tessera/distributed/tensor_parallel_grads.h"

#include <algorithm>
#include <string>

#include "tessera/core/error.h"
#include "tessera/distributed/sum_scalars.h"
#include "tessera/kernels/adamw.h"

namespace tessera::distributed {
namespace {

// Appends [offset, offset + length), merging with the previous range when adjacent.
void append(std::vector<FlatRange>& ranges, int64_t offset, int64_t length) {
  if (length == 0) return;
  if (!ranges.empty() && ranges.back().end == offset) {
    ranges.back().end += length;
  } else {
    ranges.push_back({offset, offset + length});
  }
}

// The parts of `ranges` inside `only` (both increasing), or `ranges` when only is nullptr.
std::vector<FlatRange> intersect(const std::vector<FlatRange>& ranges,
                                 const std::vector<FlatRange>* only) {
  if (only == nullptr) return ranges;
  std::vector<FlatRange> out;
  size_t j = 0;
  for (const FlatRange& r : ranges) {
    while (j < only->size() && (*only)[j].end <= r.begin) ++j;
    for (size_t k = j; k < only->size() && (*only)[k].begin < r.end; ++k) {
      const int64_t b = std::max(r.begin, (*only)[k].begin), e = std::min(r.end, (*only)[k].end);
      if (b < e) out.push_back({b, e});
    }
  }
  return out;
}

}  // namespace

TensorParallelGrads::TensorParallelGrads(model::ParameterSet& params,
                                         const parallel::TensorParallel& tp,
                                         const std::vector<FlatRange>& apart)
    : params_(params), tp_(tp) {
  const bool first_rank = tp.rank() == 0;
  // A norm range holding gradients that finalize() changes is kept apart from its neighbours
  // (not merged into one range with them): its sum of squares can then be taken after
  // finalize() while the others' are taken earlier (distributed/gradient_offload.h).
  bool last_apart = false;
  const auto add_norm = [&](int64_t offset, int64_t length, bool apart) {
    if (length == 0) return;
    if (apart || last_apart) {
      norm_ranges_.push_back({offset, offset + length});
    } else {
      append(norm_ranges_, offset, length);
    }
    last_apart = apart;
  };
  for (const model::Parameter& p : params.all()) {
    if (p.tied_copy) continue;  // counted by the stage that owns the original
    const bool in_apart = std::any_of(apart.begin(), apart.end(), [&](const FlatRange& r) {
      return r.begin < p.offset + p.numel() && p.offset < r.end;
    });
    if (p.shard.tp_dim < 0) {
      const bool partial = tp.sequence_parallel() && !p.tp_complete;  // finalize() sums it
      if (partial) append(sequence_parallel_, p.offset, p.numel());
      if (first_rank || p.tp_distinct)
        add_norm(p.offset, p.numel(), (partial && tp.size() > 1) || in_apart);
      continue;
    }
    // A piece along the split dimension is a run of rows of a row-split matrix or of elements
    // of a vector; column-split matrices (row-parallel weights) split whole heads or features.
    const bool column_split = p.shard.tp_dim == 1;
    if (column_split) {
      for (const model::ShardPiece& piece : p.pieces)
        if (piece.replicas > 1) throw Error(p.name + ": replicated column pieces are unsupported");
      add_norm(p.offset, p.numel(), in_apart);
      continue;
    }
    const int64_t stride = p.local_shape.size() == 2 ? p.local_shape[1] : 1;
    for (const model::ShardPiece& piece : p.pieces) {
      const int64_t offset = p.offset + piece.local_begin * stride, length = piece.length * stride;
      if (piece.replicas > 1) append(replicated_[piece.replicas], offset, length);
      if (piece.replica_rank == 0) add_norm(offset, length, piece.replicas > 1 || in_apart);
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

void TensorParallelGrads::all_reduce_ranges(const std::vector<FlatRange>& ranges,
                                            comm::ProcessGroup& group) {
  int64_t total = 0;
  for (const FlatRange& r : ranges) total += r.size();
  if (total == 0) return;
  float* grads = params_.flat_grads().data<float>();
  Tensor buf = Tensor::empty({total}, DType::kF32, MemoryCategory::kComm);
  float* b = buf.data<float>();
  for (const FlatRange& r : ranges) b = std::copy(grads + r.begin, grads + r.end, b);
  group.all_reduce(buf, comm::ReduceOp::kSum).wait();
  const float* src = buf.data<float>();
  for (const FlatRange& r : ranges) {
    std::copy(src, src + r.size(), grads + r.begin);
    src += r.size();
  }
}

void TensorParallelGrads::finalize(const std::vector<FlatRange>* only) {
  if (tp_.size() == 1) return;
  // Equal layouts give every TP rank the same ranges (and so the same total), so either all
  // members reduce or none does (all_reduce_ranges skips an empty set): the calls stay matched.
  if (tp_.sequence_parallel()) all_reduce_ranges(intersect(sequence_parallel_, only), *tp_.group());
  for (const auto& [replicas, ranges] : replicated_)
    all_reduce_ranges(intersect(ranges, only), *replica_groups_.at(replicas));
}

double TensorParallelGrads::local_sum_squares(const std::vector<FlatRange>* only) const {
  const float* grads = params_.flat_grads().data<float>();
  double sum = 0;
  for (const FlatRange& r : intersect(norm_ranges_, only))
    sum += kernels::sum_squares(grads + r.begin, r.size());
  return sum;
}

std::vector<FlatRange> TensorParallelGrads::counted_ranges(
    const std::vector<FlatRange>* only) const {
  return intersect(norm_ranges_, only);
}

std::vector<FlatRange> TensorParallelGrads::finalized_ranges() const {
  if (tp_.size() == 1) return {};
  std::vector<FlatRange> out;
  if (tp_.sequence_parallel()) out = sequence_parallel_;
  for (const auto& [replicas, ranges] : replicated_)
    out.insert(out.end(), ranges.begin(), ranges.end());
  return out;
}

double TensorParallelGrads::sum_squares() const {
  return sum_over(tp_.group().get(), {local_sum_squares()})[0];
}

}  // namespace tessera::distributed
