#include "tessera/distributed/data_parallel_grads.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::distributed {

DataParallelGrads::DataParallelGrads(model::ParameterSet& params,
                                     std::shared_ptr<comm::ProcessGroup> dp, int64_t bucket_elems,
                                     bool sharded, bool overlap)
    : params_(params), dp_(std::move(dp)), sharded_(sharded), overlap_(overlap) {
  if (dp_) {
    dp_size_ = dp_->size();
    dp_rank_ = dp_->rank();
  }
  const int64_t n = params.numel();
  TESSERA_CHECK_MSG(n % dp_size_ == 0, "flat buffer not padded to the data-parallel size");
  // Bucket sizes: a multiple of DP, at least DP, at most about bucket_elems.
  const int64_t step = std::max<int64_t>(dp_size_, bucket_elems / dp_size_ * dp_size_);
  for (int64_t end = n; end > 0;) {
    const int64_t begin = std::max<int64_t>(0, end - step);
    buckets_.push_back({begin, end});
    end = begin;
  }
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
    const int64_t part = it->size() / dp_size_;
    if (sharded_)
      owned_.push_back({it->begin + dp_rank_ * part, it->begin + (dp_rank_ + 1) * part});
  }
  if (!sharded_) owned_.push_back({0, n});
  scatter_out_.resize(buckets_.size());
}

void DataParallelGrads::launch(size_t b) {
  if (dp_size_ == 1) return;
  const FlatRange r = buckets_[b];
  Tensor grads = params_.flat_grads().slice_rows(r.begin, r.end);
  if (!sharded_) {
    pending_.push_back(dp_->all_reduce(grads, comm::ReduceOp::kSum));
    return;
  }
  // The output may not alias the input (MPI): this rank's part lands in a side buffer and is
  // copied into place in finish().
  scatter_out_[b] = Tensor::empty({r.size() / dp_size_}, DType::kF32, MemoryCategory::kComm);
  pending_.push_back(dp_->reduce_scatter(grads, scatter_out_[b], comm::ReduceOp::kSum));
}

void DataParallelGrads::grads_ready(int64_t offset) {
  if (!overlap_) return;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= offset)
    launch(next_bucket_++);
}

void DataParallelGrads::finish() {
  while (next_bucket_ < buckets_.size()) launch(next_bucket_++);
  for (const comm::Work& w : pending_) w.wait();
  pending_.clear();
  next_bucket_ = 0;
  if (!sharded_ || dp_size_ == 1) return;
  float* grads = params_.flat_grads().data<float>();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const int64_t part = buckets_[b].size() / dp_size_;
    const float* src = scatter_out_[b].data<float>();
    std::copy(src, src + part, grads + buckets_[b].begin + dp_rank_ * part);
    scatter_out_[b] = Tensor();
  }
}

void DataParallelGrads::gather_values() {
  if (!sharded_ || dp_size_ == 1) return;
  Tensor& values = params_.flat_values();
  std::vector<comm::Work> works;
  std::vector<Tensor> parts;
  for (const FlatRange& r : buckets_) {
    const int64_t part = r.size() / dp_size_;
    Tensor mine = values.slice_rows(r.begin + dp_rank_ * part, r.begin + (dp_rank_ + 1) * part)
                      .clone(MemoryCategory::kComm);  // the input may not alias the output
    Tensor whole = values.slice_rows(r.begin, r.end);
    works.push_back(dp_->all_gather(mine, whole));
    parts.push_back(mine);
  }
  for (const comm::Work& w : works) w.wait();
}

Tensor DataParallelGrads::gather_owned(const Tensor& local) const {
  const int64_t n = params_.numel();
  Tensor whole = Tensor::empty({n}, DType::kF32, MemoryCategory::kOther);
  if (!sharded_ || dp_size_ == 1) {
    TESSERA_CHECK(local.numel() == n);
    std::copy(local.data<float>(), local.data<float>() + n, whole.data<float>());
    return whole;
  }
  int64_t at = 0;
  for (size_t i = 0; i < owned_.size(); ++i) {
    // owned_ is in increasing order; its i-th range is part dp_rank_ of bucket (reversed index).
    const FlatRange bucket = buckets_[buckets_.size() - 1 - i];
    Tensor mine = local.slice_rows(at, at + owned_[i].size());
    Tensor out = whole.slice_rows(bucket.begin, bucket.end);
    dp_->all_gather(mine, out).wait();
    at += owned_[i].size();
  }
  return whole;
}

}  // namespace tessera::distributed
