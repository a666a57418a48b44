// Data-parallel gradient reduction over bucketed flat buffers (Megatron's DistributedDataParallel
// with its grad buffer buckets; ZeRO's partitioned gradients).
//
// The flat fp32 gradient buffer (model::ParameterSet, padded to a multiple of DP) is cut into
// buckets of about `bucket_elems` elements, each a multiple of DP, counted from the end of the
// buffer because backward produces the last layers' gradients first. During the last
// micro-batch's backward the model reports how far its gradients are final
// (GPTModel::set_grads_ready_hook); a bucket whose elements are all final is reduced at once on
// the communication thread while backward continues (overlap), or, without overlap, all buckets
// are reduced after backward. Earlier micro-batches only accumulate: nothing is communicated.
//
// Each rank's gradients are already scaled by 1/(tokens in the global batch), so the reduction is
// a SUM over DP: the average over ranks of per-rank means when every rank counts the same tokens,
// and exact (per token) otherwise.
//   sharded = false (ZeRO 0): every bucket is all-reduced; every rank holds the whole gradient.
//   sharded = true (ZeRO 1, the distributed optimizer): every bucket is reduce-scattered; rank d
//     owns part d of each bucket (owned()), and only those elements of the buffer hold reduced
//     gradients afterwards. After its optimizer step over owned(), gather_values() all-gathers the
//     updated parameter values bucket by bucket.
#pragma once

#include <memory>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/model/parameter.h"

namespace tessera::distributed {

// A range [begin, end) of flat-buffer elements.
struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

class DataParallelGrads {
 public:
  // `dp` may be nullptr (one data-parallel rank: nothing to reduce). params.numel() must be a
  // multiple of the DP size. `params` must outlive this.
  DataParallelGrads(model::ParameterSet& params, std::shared_ptr<comm::ProcessGroup> dp,
                    int64_t bucket_elems, bool sharded, bool overlap);

  // Marks gradients at flat offsets >= `offset` final for this iteration; with overlap, starts
  // reducing every bucket that became complete. Call from the model's hook during the last
  // micro-batch only.
  void grads_ready(int64_t offset);
  // Reduces what is left and waits for every bucket. After this the gradients of owned() are
  // reduced. Resets the readiness for the next iteration.
  void finish();
  // After the optimizer updated the values of owned(): all-gathers them (sharded only; a no-op
  // otherwise). Collective over DP.
  void gather_values();
  // Gathers the fp32 elements `local` holds for owned() (packed in owned() order) into a whole
  // flat fp32 tensor on every rank (for exports of sharded master weights). Collective.
  Tensor gather_owned(const Tensor& local) const;

  // The elements whose reduced gradients (and, sharded, optimizer state) this rank holds, in
  // increasing order. The whole buffer unless sharded.
  const std::vector<FlatRange>& owned() const { return owned_; }
  int dp_size() const { return dp_size_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  void launch(size_t bucket);

  model::ParameterSet& params_;
  std::shared_ptr<comm::ProcessGroup> dp_;
  int dp_size_ = 1, dp_rank_ = 0;
  bool sharded_, overlap_;
  std::vector<FlatRange> buckets_;  // from the end of the buffer to its start
  std::vector<FlatRange> owned_;
  size_t next_bucket_ = 0;  // buckets [0, next_bucket_) have been launched
  std::vector<comm::Work> pending_;
  std::vector<Tensor> scatter_out_;  // per bucket: the reduce-scatter output (this rank's part)
};

}  // namespace tessera::distributed
