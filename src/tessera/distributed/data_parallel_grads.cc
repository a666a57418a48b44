#include "tessera/distributed/data_parallel_grads.h"

#include <algorithm>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/core/memory.h"
#include "tessera/kernels/elementwise.h"

namespace tessera::distributed {
namespace {

// `buckets` (from the end of the buffer to its start) cut wherever one of `ranges` begins or
// ends strictly inside one, so that each piece lies inside a range or outside all of them.
std::vector<FlatRange> cut_at_edges(const std::vector<FlatRange>& buckets,
                                    const std::vector<FlatRange>& ranges) {
  std::vector<FlatRange> cut;
  for (const FlatRange& b : buckets) {
    std::vector<int64_t> edges = {b.begin, b.end};
    for (const FlatRange& r : ranges) {
      if (r.begin > b.begin && r.begin < b.end) edges.push_back(r.begin);
      if (r.end > b.begin && r.end < b.end) edges.push_back(r.end);
    }
    std::sort(edges.rbegin(), edges.rend());
    for (size_t i = 0; i + 1 < edges.size(); ++i) cut.push_back({edges[i + 1], edges[i]});
  }
  return cut;
}

bool inside_one(const FlatRange& piece, const std::vector<FlatRange>& ranges) {
  return std::any_of(ranges.begin(), ranges.end(), [&](const FlatRange& r) {
    return piece.begin >= r.begin && piece.end <= r.end;
  });
}

}  // namespace

DataParallelGrads::DataParallelGrads(model::ParameterSet& params,
                                     std::shared_ptr<comm::ProcessGroup> dp,
                                     const ShardingPlan& plan, std::vector<FlatRange> buckets,
                                     std::shared_ptr<comm::ProcessGroup> expert_dp,
                                     std::vector<FlatRange> expert_ranges,
                                     const EmbeddingRowsLayout& embedding_rows)
    : params_(params), dp_(std::move(dp)), expert_dp_(std::move(expert_dp)), plan_(plan) {
  const int64_t bucket_elems = plan.bucket_elems;
  if (dp_) {
    dp_size_ = dp_->size();
    dp_rank_ = dp_->rank();
  }
  const int64_t n = params.numel();
  TESSERA_CHECK_MSG(n % dp_size_ == 0, "flat buffer not padded to the data-parallel size");
  if (!buckets.empty()) {
    int64_t at = 0;
    for (const FlatRange& b : buckets) {
      TESSERA_CHECK_MSG(b.begin == at && b.size() > 0 && b.size() % dp_size_ == 0,
                        "buckets must tile the buffer in multiples of the data-parallel size");
      at = b.end;
    }
    TESSERA_CHECK(at == n);
    buckets_.assign(buckets.rbegin(), buckets.rend());
  } else {
    // Bucket sizes: a multiple of DP, at least DP, at most about bucket_elems. With experts, a
    // multiple of the expert-DP size too (under expert TP 1 it need not divide DP): the cuts then
    // split expert ranges (padded likewise) into parts that group can share.
    const int64_t unit =
        expert_dp_ && !expert_ranges.empty() ? std::lcm<int64_t>(dp_size_, expert_dp_->size())
                                             : dp_size_;
    const int64_t step = std::max<int64_t>(unit, bucket_elems / unit * unit);
    for (int64_t end = n; end > 0;) {
      const int64_t begin = std::max<int64_t>(0, end - step);
      buckets_.push_back({begin, end});
      end = begin;
    }
  }
  // The word embedding by rows: its buckets are its own.
  if (embedding_by_rows(plan, dp_size_, embedding_rows)) {
    rows_range_ = embedding_rows.range;
    row_elems_ = embedding_rows.row_elems;
    buckets_ = cut_at_edges(buckets_, {rows_range_});
  }
  // Expert ranges become buckets of their own (split off any bucket they fall into).
  expert_bucket_.assign(buckets_.size(), 0);
  if (!expert_ranges.empty()) {
    buckets_ = cut_at_edges(buckets_, expert_ranges);
    expert_bucket_.assign(buckets_.size(), 0);
    for (size_t b = 0; b < buckets_.size(); ++b) {
      expert_bucket_[b] = inside_one(buckets_[b], expert_ranges) ? 1 : 0;
      TESSERA_CHECK_MSG(buckets_[b].size() % size_of(b) == 0,
                        "an expert bucket does not split over the expert-data-parallel group");
    }
  }
  // Launch order: the embedding's buckets by rows first (final after the output layer's
  // backward), then every other bucket from the end of the buffer.
  rows_bucket_.assign(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buffer_order_.push_back(b);
    if (rows_range_.size() > 0 && inside_one(buckets_[b], {rows_range_})) {
      rows_bucket_[b] = 1;
      rows_first_order_.push_back(b);
    }
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!rows_bucket_[b]) rows_first_order_.push_back(b);
  if (sharded()) {
    for (size_t b = buckets_.size(); b-- > 0;) owned_.push_back(owned_part(b));
  } else {
    owned_.push_back({0, n});
  }
  work_.resize(buckets_.size());
  scatter_out_.resize(buckets_.size());
}

void DataParallelGrads::set_boundary_hook(std::function<void(const FlatRange&)> hook) {
  boundary_hook_ = std::move(hook);
  if (boundary_hook_) prefer_huge_pages(params_.flat_grads().raw(), params_.flat_grads().nbytes());
}

void DataParallelGrads::start_iteration() {
  if (boundary_hook_) {  // the owned gradients leave memory at the boundary: none held before
    release_pages(params_.flat_grads().raw(), params_.flat_grads().nbytes());
    return;
  }
  if (!plan_.shards_gradients() || (dp_size_ == 1 && !expert_dp_)) {
    params_.zero_grads();
    return;
  }
  float* grads = params_.flat_grads().data<float>();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const FlatRange mine = owned_part(b), bucket = buckets_[b];
    release_pages(grads + bucket.begin, (mine.begin - bucket.begin) * sizeof(float));
    std::fill(grads + mine.begin, grads + mine.end, 0.0f);
    release_pages(grads + mine.end, (bucket.end - mine.end) * sizeof(float));
  }
}

void DataParallelGrads::launch(size_t b) {
  comm::ProcessGroup* group = group_of(b);
  if (size_of(b) == 1) return;
  const FlatRange r = buckets_[b];
  Tensor grads = params_.flat_grads().slice_rows(r.begin, r.end);
  if (!sharded()) {
    work_[b] = group->all_reduce(grads, comm::ReduceOp::kSum, plan_.grad_reduce_dtype);
    return;
  }
  // The output may not alias the input (MPI): this rank's part lands in a side buffer and is
  // copied into place by complete().
  scatter_out_[b] = Tensor::empty({r.size() / size_of(b)}, DType::kF32, MemoryCategory::kComm);
  work_[b] =
      group->reduce_scatter(grads, scatter_out_[b], comm::ReduceOp::kSum, plan_.grad_reduce_dtype);
}

void DataParallelGrads::complete(size_t b) {
  work_[b].wait();
  work_[b] = comm::Work();
  if (sharded() && size_of(b) > 1) {
    float* grads = params_.flat_grads().data<float>();
    const FlatRange mine = owned_part(b), bucket = buckets_[b];
    const float* src = scatter_out_[b].data<float>();
    std::copy(src, src + mine.size(), grads + mine.begin);
    scatter_out_[b] = Tensor();
    // The unowned parts are scratch until the next micro-batch (stage 2), or (ZeRO 1 with the
    // gradients leaving memory at the boundary) until the next iteration.
    if (plan_.shards_gradients() || leaving_at_boundary()) {
      release_pages(grads + bucket.begin, (mine.begin - bucket.begin) * sizeof(float));
      release_pages(grads + mine.end, (bucket.end - mine.end) * sizeof(float));
    }
  }
  if (leaving_at_boundary()) boundary_hook_(owned_part(b));
}

void DataParallelGrads::grads_ready(int64_t offset) {
  if (!plan_.overlap_grad_reduce) return;
  // The same order on every rank: collectives must match.
  const std::vector<size_t>& order = launch_order();
  while (next_launch_ < order.size() && ready(order[next_launch_], offset))
    launch(order[next_launch_++]);
  // Stage 2 gives pages back as soon as a bucket is reduced, not at the end of backward; so
  // does the boundary hook (the gradients leave memory) at any stage.
  if (plan_.shards_gradients() || leaving_at_boundary())
    while (next_complete_ < next_launch_ && work_[order[next_complete_]].done())
      complete(order[next_complete_++]);
}

void DataParallelGrads::finish() {
  const std::vector<size_t>& order = launch_order();
  while (next_launch_ < order.size()) launch(order[next_launch_++]);
  while (next_complete_ < order.size()) complete(order[next_complete_++]);
  next_launch_ = next_complete_ = 0;
  if (rows_.armed) {
    TESSERA_CHECK_MSG(rows_.filled,
                      "the embedding's rows were armed but backward did not fill them");
    reduce_embedding_rows();
    rows_.armed = false;
    rows_.clear();
  }
}

void DataParallelGrads::reduce_embedding_rows() {
  comm::ProcessGroup& group = *dp_;
  // Every rank's touched rows, padded with -1 to the longest list, then their union.
  Tensor count = Tensor::empty({1}, DType::kI64, MemoryCategory::kComm);
  Tensor counts = Tensor::empty({dp_size_}, DType::kI64, MemoryCategory::kComm);
  count.data<int64_t>()[0] = static_cast<int64_t>(rows_.rows.size());
  group.all_gather(count, counts).wait();
  const int64_t longest =
      *std::max_element(counts.data<int64_t>(), counts.data<int64_t>() + dp_size_);
  if (longest == 0) return;
  Tensor mine = Tensor::empty({longest}, DType::kI32, MemoryCategory::kComm);
  Tensor all = Tensor::empty({longest * dp_size_}, DType::kI32, MemoryCategory::kComm);
  std::fill(mine.data<int32_t>(), mine.data<int32_t>() + longest, -1);
  std::copy(rows_.rows.begin(), rows_.rows.end(), mine.data<int32_t>());
  group.all_gather(mine, all).wait();
  std::vector<int32_t> rows;
  for (int64_t i = 0; i < all.numel(); ++i)
    if (all.data<int32_t>()[i] >= 0) rows.push_back(all.data<int32_t>()[i]);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());

  // This rank's rows at their places in the union (zeros elsewhere), summed over DP.
  const int64_t C = row_elems_;
  Tensor sum =
      Tensor::zeros({static_cast<int64_t>(rows.size()) * C}, DType::kF32, MemoryCategory::kComm);
  float* sums = sum.data<float>();
  const float* local = rows_.grad.data<float>();
  for (size_t i = 0; i < rows_.rows.size(); ++i) {
    const int64_t at = std::lower_bound(rows.begin(), rows.end(), rows_.rows[i]) - rows.begin();
    std::copy(local + i * C, local + (i + 1) * C, sums + at * C);
  }
  group.all_reduce(sum, comm::ReduceOp::kSum, plan_.grad_reduce_dtype).wait();

  // Added to the reduced rest (ZeRO 0: every rank holds all of it).
  float* grads = params_.flat_grads().data<float>() + rows_range_.begin;
  for (size_t u = 0; u < rows.size(); ++u)
    kernels::add(grads + rows[u] * C, grads + rows[u] * C, sums + u * C, C);
}

void DataParallelGrads::gather_values() {
  if (!sharded()) return;
  Tensor& values = params_.flat_values();
  std::vector<comm::Work> works;
  std::vector<Tensor> parts;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    // ZeRO 3 gathers parameters per use (Zero3Params), experts' units included.
    if (size_of(b) == 1 || plan_.shards_parameters()) continue;
    const FlatRange mine = owned_part(b);
    // The input may not alias the output.
    Tensor part = values.slice_rows(mine.begin, mine.end).clone(MemoryCategory::kComm);
    Tensor whole = values.slice_rows(buckets_[b].begin, buckets_[b].end);
    works.push_back(group_of(b)->all_gather(part, whole));
    parts.push_back(part);
  }
  for (const comm::Work& w : works) w.wait();
}

Tensor DataParallelGrads::gather_owned(const Tensor& local) const {
  const int64_t n = params_.numel();
  Tensor whole = Tensor::empty({n}, DType::kF32, MemoryCategory::kOther);
  if (!sharded()) {
    TESSERA_CHECK(local.numel() == n);
    std::copy(local.data<float>(), local.data<float>() + n, whole.data<float>());
    return whole;
  }
  int64_t at = 0;
  for (size_t b = buckets_.size(); b-- > 0;) {  // owned_ is in increasing order
    const int64_t part = buckets_[b].size() / size_of(b);
    Tensor out = whole.slice_rows(buckets_[b].begin, buckets_[b].end);
    if (size_of(b) == 1)
      std::copy(local.data<float>() + at, local.data<float>() + at + part, out.data<float>());
    else
      group_of(b)->all_gather(local.slice_rows(at, at + part), out).wait();
    at += part;
  }
  return whole;
}

}  // namespace tessera::distributed
