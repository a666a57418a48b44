// Data-parallel gradient reduction over bucketed flat buffers (Megatron's DistributedDataParallel
// with its grad buffer buckets; ZeRO's partitioned gradients, stages 0 to 2).
//
// The flat fp32 gradient buffer (model::ParameterSet, padded to a multiple of DP) is cut into
// buckets of about `bucket_elems` elements, each a multiple of DP, counted from the end of the
// buffer because backward produces the last layers' gradients first. During backward the model
// reports how far its gradients are final (model::ChunkRunner::set_grads_ready_hook); a bucket
// whose elements are all final is reduced at once on the communication thread while backward
// continues (overlap), or, without overlap, all buckets are reduced after backward.
//
// Each rank's gradients are already scaled by 1/(tokens in the global batch), so the reduction is
// a SUM over DP: the average over ranks of per-rank means when every rank counts the same tokens,
// and exact (per token) otherwise.
//   stage 0: in the last micro-batch every bucket is all-reduced; every rank holds the whole
//     gradient. Earlier micro-batches only accumulate.
//   stage 1 (the distributed optimizer): in the last micro-batch every bucket is
//     reduce-scattered; rank d owns part d of each bucket (owned()) and only those elements hold
//     reduced gradients afterwards. After the optimizer step over owned(), gather_values()
//     all-gathers the updated parameter values bucket by bucket.
//   stage 2: as stage 1, but every micro-batch reduce-scatters (DeepSpeed's choice: the full
//     gradient is never kept). Rank d's owned part carries the running sum: it holds
//     acc + this micro-batch's local gradient when the reduce-scatter reads it, while the other
//     ranks hold only their local gradient there (their copy of that part is zero before
//     backward), so the result is the new running sum. Once a bucket is reduced its unowned
//     parts are zeroed and their pages given back (core/memory.h release_pages), so besides the
//     owned Ψ/DP only the buckets of the layers in flight are resident. (Under an interleaved
//     pipeline schedule a reduction follows each micro-batch's last chunk instead: the buckets
//     then hold whatever accumulated since the previous one, other micro-batches' chunks too.)
//   stage 3: gradients as stage 2, with one bucket per model unit (GPTModel::units()), the same
//     units whose parameters distributed::Zero3Params gathers when used (experts' units over
//     the expert-DP group); gather_values() has nothing to do.
//
// The word embedding by rows (stage 0 with overlap, DP > 1, when the caller names its range and
// the rows' union cannot pass half of it: embedding_by_rows()):
// its backward runs last, so its bucket would be reduced after backward where nothing hides it.
// Instead the caller hands the runner embedding_rows() with the readiness hook; the embedding's
// backward then writes the rows its tokens touched there (model/embedding_row_grads.h) and its
// flat gradient (the tied output layer's part, earlier micro-batches' sums) is final at the
// first readiness report, so its buckets are reduced first, while backward goes on. finish()
// then sums the touched rows over DP (their union: an all-gather of row indices, one all-reduce
// of those rows) and adds them in. Each element is then sum(flat parts) + sum(rows) instead of
// sum(flat part + rows): the same terms in another order.
//
// Expert parallelism: the flat ranges of this rank's MoE experts (GPTModel::expert_ranges())
// hold parameters that only the ranks of this rank's expert-data-parallel group share, so the
// buckets are cut at their edges and an expert bucket is reduced, sharded and gathered over that
// group instead (Megatron's separate expert gradient buffers). Its size divides the DP size, so
// buckets padded to multiples of DP split evenly over it too.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/distributed/sharding_plan.h"
#include "tessera/model/embedding_row_grads.h"
#include "tessera/model/parameter.h"

namespace tessera::distributed {

// A range [begin, end) of flat-buffer elements.
struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Part `index` of `parts` equal parts of `range` (whose size is a multiple of `parts`): what a
// data-parallel rank owns of a gradient bucket or a ZeRO-3 unit.
inline FlatRange part_of(const FlatRange& range, int parts, int index) {
  const int64_t part = range.size() / parts;
  return {range.begin + index * part, range.begin + (index + 1) * part};
}

// Where the word embedding lies in a rank's flat gradient and how it is used: for
// DataParallelGrads to reduce it by rows (see above). An empty range: never.
struct EmbeddingRowsLayout {
  FlatRange range;        // the word embedding's flat range (this rank's vocabulary rows)
  int64_t row_elems = 0;  // elements of a row (the hidden size)
  int64_t tokens = 0;     // tokens of a micro-batch on this rank
};

// At most how many rows the union of `dp` ranks' rows holds: min(vocab rows, tokens x DP).
inline int64_t embedding_rows_bound(int64_t vocab_rows, int64_t tokens, int dp) {
  return std::min(vocab_rows, tokens * dp);
}

// Whether the reduction takes the word embedding by rows: ZeRO 0 overlapped over more than one
// rank (at ZeRO 1-2 its reduce-scatter's output buffer would be held through backward, where
// activations peak), its edges on multiples of DP, and the rows' union bound at most half its
// rows (beyond that reducing it whole after backward moves fewer bytes in all). The caller
// makes sure the rank's part is one chunk holding the embeddings.
inline bool embedding_by_rows(const ShardingPlan& plan, int dp, const EmbeddingRowsLayout& e) {
  if (e.range.size() == 0 || e.row_elems <= 0 || dp < 2 || !plan.overlap_grad_reduce ||
      plan.stage != ShardingPlan::Stage::kReplicated || e.range.begin % dp != 0 ||
      e.range.end % dp != 0)
    return false;
  const int64_t vocab_rows = e.range.size() / e.row_elems;
  return 2 * embedding_rows_bound(vocab_rows, e.tokens, dp) <= vocab_rows;
}

class DataParallelGrads {
 public:
  // `dp` may be nullptr (one data-parallel rank: nothing to reduce). params.numel() must be a
  // multiple of the DP size. The plan gives the stage, the bucket size and overlap. `buckets`:
  // explicit bucket ranges in increasing order covering the buffer, each a multiple of DP
  // (stage 3: the model's units); empty = cut by plan.bucket_elems. `params` must outlive this.
  // `expert_dp` and `expert_ranges` (increasing, each a multiple of DP): the expert-data-parallel
  // group and the flat ranges it reduces (none without expert parallelism).
  // `embedding_rows`: the word embedding, to reduce it by rows where embedding_by_rows() says.
  DataParallelGrads(model::ParameterSet& params, std::shared_ptr<comm::ProcessGroup> dp,
                    const ShardingPlan& plan, std::vector<FlatRange> buckets = {},
                    std::shared_ptr<comm::ProcessGroup> expert_dp = nullptr,
                    std::vector<FlatRange> expert_ranges = {},
                    const EmbeddingRowsLayout& embedding_rows = {});

  // Zeroes the gradients for a new iteration (stage 2: the owned parts; the rest is released;
  // with a boundary hook, everything is released: zero pages until backward writes them).
  void start_iteration();
  // Whether the coming reductions are the iteration's last (its last micro-batch): the owned
  // gradients they leave are final.
  void set_accumulation_boundary(bool last) { boundary_ = last; }
  // Called with each owned range (owned_part of a bucket) once its gradients are final: at the
  // accumulation boundary, when the bucket's reduction completed (GradientOffload::part_final).
  // The gradient buffer then asks for huge pages: its pages come and go every iteration.
  void set_boundary_hook(std::function<void(const FlatRange&)> hook);
  // Whether the micro-batch `m` of `count` reduces (and so should report readiness).
  bool reduces_in(int64_t m, int64_t count) const {
    return plan_.shards_gradients() || m == count - 1;
  }
  // Marks gradients at flat offsets >= `offset` final for this micro-batch; with overlap, starts
  // reducing every bucket that became complete (and, stage 2, finishes buckets already reduced).
  void grads_ready(int64_t offset);
  // The sink to hand model::ChunkRunner::set_grads_ready_hook with the hook in every reducing
  // micro-batch, or nullptr where the embedding is not reduced by rows.
  model::EmbeddingRowGrads* embedding_rows() {
    return rows_range_.size() > 0 && !boundary_hook_ ? &rows_ : nullptr;
  }
  // After a reducing micro-batch's backward: reduces what is left and waits for every bucket.
  // After the last micro-batch the gradients of owned() are reduced.
  void finish();
  // After the optimizer updated the values of owned(): all-gathers them (stages 1-2; a no-op at
  // stage 3, whose parameters Zero3Params gathers). Collective over DP (and the expert-DP group
  // for expert buckets).
  void gather_values();
  // Gathers the fp32 elements `local` holds for owned() (packed in owned() order) into a whole
  // flat fp32 tensor on every rank (for exports of sharded master weights). Collective over DP
  // (and the expert-DP group for expert buckets).
  Tensor gather_owned(const Tensor& local) const;

  // The elements whose reduced gradients (and, sharded, optimizer state) this rank holds, in
  // increasing order. The whole buffer at stage 0.
  const std::vector<FlatRange>& owned() const { return owned_; }
  bool sharded() const { return plan_.shards_optimizer_state(); }
  const ShardingPlan& plan() const { return plan_; }
  int dp_size() const { return dp_size_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  void launch(size_t bucket);
  // Whether bucket b's gradients are final once those at offsets >= `offset` are.
  bool ready(size_t b, int64_t offset) const {
    return buckets_[b].begin >= offset || (rows_bucket_[b] && rows_.armed);
  }
  void reduce_embedding_rows();  // sums the armed rows over DP and adds them into owned()
  void complete(size_t bucket);  // waits for it; copies its reduced part into place
  // The group that reduces bucket b (nullptr: one rank), its size and this rank's index in it.
  comm::ProcessGroup* group_of(size_t b) const {
    return expert_bucket_[b] ? expert_dp_.get() : dp_.get();
  }
  int size_of(size_t b) const { return group_of(b) ? group_of(b)->size() : 1; }
  int rank_of(size_t b) const { return group_of(b) ? group_of(b)->rank() : 0; }
  // The reductions under way leave final gradients that the boundary hook takes away.
  bool leaving_at_boundary() const { return boundary_ && boundary_hook_ != nullptr; }
  FlatRange owned_part(size_t bucket) const {
    return part_of(buckets_[bucket], size_of(bucket), rank_of(bucket));
  }

  model::ParameterSet& params_;
  std::shared_ptr<comm::ProcessGroup> dp_, expert_dp_;
  int dp_size_ = 1, dp_rank_ = 0;
  std::vector<char> expert_bucket_;  // per bucket: reduced over expert_dp_
  ShardingPlan plan_;
  std::vector<FlatRange> buckets_;  // from the end of the buffer to its start
  // Bucket indices in launch order: with the embedding's rows armed, its buckets first, then
  // the others from the end of the buffer; unarmed (a caller that did not hand the sink over),
  // all from the end of the buffer. Either way the same on every rank.
  const std::vector<size_t>& launch_order() const {
    return rows_.armed ? rows_first_order_ : buffer_order_;
  }
  std::vector<size_t> rows_first_order_, buffer_order_;
  FlatRange rows_range_;              // the word embedding reduced by rows (empty: none)
  int64_t row_elems_ = 0;
  std::vector<char> rows_bucket_;  // per bucket: inside rows_range_
  model::EmbeddingRowGrads rows_;
  std::vector<FlatRange> owned_;
  size_t next_launch_ = 0;           // launch_order()[0, next_launch_) have been launched
  size_t next_complete_ = 0;         // launch_order()[0, next_complete_) have been completed
  std::vector<comm::Work> work_;     // per bucket
  std::vector<Tensor> scatter_out_;  // per bucket: the reduce-scatter output (this rank's part)
  bool boundary_ = true;
  std::function<void(const FlatRange&)> boundary_hook_;
};

}  // namespace tessera::distributed
