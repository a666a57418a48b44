#include "tessera/parallel/mappings.h"

#include <cstring>
#include <string>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::parallel {
namespace {

void check_float(const Tensor& t, const char* what) {
  const DType d = t.dtype();
  if (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16) {
    throw Error(std::string(what) + ": tensor is " + dtype_name(d) +
                ", expected fp32, bf16 or fp16");
  }
}

// The type a sum of t is formed in (comm::ProcessGroup's sum_dtype).
DType sum_dtype_of(const Tensor& t, SixteenBitSums sums) {
  return sums == SixteenBitSums::kInOwnType ? t.dtype() : DType::kF32;
}

Tensor all_reduce_sum(Tensor t, comm::ProcessGroup& tp, const char* what, SixteenBitSums sums) {
  check_float(t, what);
  if (tp.size() == 1) return t;
  tp.all_reduce(t, comm::ReduceOp::kSum, sum_dtype_of(t, sums)).wait();
  return t;
}

// Rows of a (batch, S, ...) tensor per sample block: S/n rows of `row` elements each.
void check_batch(const Tensor& t, int64_t batch, const char* what) {
  if (t.ndim() < 1) throw Error(std::string(what) + ": tensor has no dimensions");
  if (batch < 1 || t.dim(0) % batch != 0)
    throw Error(std::string(what) + ": " + std::to_string(t.dim(0)) +
                " rows are not a whole number of " + std::to_string(batch) + " samples");
}

// Copies between the member-major (n, batch, S/n, ...) order the collectives use and the
// sample-major (batch, n, S/n, ...) order of the activations: `block` elements per (member,
// sample) pair. to_sample_major selects the direction.
void permute_blocks(const Tensor& src, Tensor& dst, int n, int64_t batch, bool to_sample_major) {
  const int64_t block = src.nbytes() / (n * batch);
  const auto* s = static_cast<const uint8_t*>(src.raw());
  auto* d = static_cast<uint8_t*>(dst.raw());
#pragma omp parallel for collapse(2) if (src.nbytes() > (1 << 20))
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t member_major = (r * batch + b) * block, sample_major = (b * n + r) * block;
      if (to_sample_major) std::memcpy(d + sample_major, s + member_major, block);
      else std::memcpy(d + member_major, s + sample_major, block);
    }
}

// (batch, S/n, ...) on every member -> (batch, S, ...), slices in rank order within a sample.
Tensor all_gather_sequence(const Tensor& x, comm::ProcessGroup& tp, int64_t batch,
                           const char* what) {
  check_float(x, what);
  check_batch(x, batch, what);
  if (tp.size() == 1) return x.clone(x.category());
  Shape full = x.shape();
  full[0] *= tp.size();
  Tensor out = Tensor::empty(full, x.dtype(), x.category());
  if (batch == 1) {
    tp.all_gather(x, out).wait();
    return out;
  }
  Tensor member_major = Tensor::empty(full, x.dtype(), MemoryCategory::kComm);
  tp.all_gather(x, member_major).wait();
  permute_blocks(member_major, out, tp.size(), batch, /*to_sample_major=*/true);
  return out;
}

// (batch, S, ...) on every member -> (batch, S/n, ...) = this member's slice of the sum.
Tensor reduce_scatter_sequence(const Tensor& x, comm::ProcessGroup& tp, int64_t batch,
                               const char* what, SixteenBitSums sums) {
  check_float(x, what);
  check_batch(x, batch, what);
  const int64_t S = x.dim(0) / batch;
  if (S % tp.size() != 0) {
    throw Error(std::string(what) + ": sequence length " + std::to_string(S) + " of " +
                shape_str(x.shape()) + " (" + std::to_string(batch) +
                " samples) is not divisible by the tensor-parallel size " +
                std::to_string(tp.size()));
  }
  if (tp.size() == 1) return x.clone(x.category());
  Shape part = x.shape();
  part[0] /= tp.size();
  Tensor out = Tensor::empty(part, x.dtype(), x.category());
  if (batch == 1) {
    tp.reduce_scatter(x, out, comm::ReduceOp::kSum, sum_dtype_of(x, sums)).wait();
    return out;
  }
  Tensor member_major = Tensor::empty(x.shape(), x.dtype(), MemoryCategory::kComm);
  permute_blocks(x, member_major, tp.size(), batch, /*to_sample_major=*/false);
  tp.reduce_scatter(member_major, out, comm::ReduceOp::kSum, sum_dtype_of(x, sums)).wait();
  return out;
}

}  // namespace

Tensor copy_to_tp_region_backward(Tensor dx, comm::ProcessGroup& tp, SixteenBitSums sums) {
  return all_reduce_sum(std::move(dx), tp, "copy_to_tp_region_backward", sums);
}

Tensor reduce_from_tp_region_forward(Tensor y, comm::ProcessGroup& tp, SixteenBitSums sums) {
  return all_reduce_sum(std::move(y), tp, "reduce_from_tp_region_forward", sums);
}

Tensor gather_from_sequence_parallel_region_forward(const Tensor& x, comm::ProcessGroup& tp,
                                                    int64_t batch) {
  return all_gather_sequence(x, tp, batch, "gather_from_sequence_parallel_region_forward");
}

Tensor gather_from_sequence_parallel_region_backward(const Tensor& dy, comm::ProcessGroup& tp,
                                                     int64_t batch, SixteenBitSums sums) {
  return reduce_scatter_sequence(dy, tp, batch, "gather_from_sequence_parallel_region_backward",
                                 sums);
}

Tensor reduce_scatter_to_sequence_parallel_region_forward(const Tensor& y, comm::ProcessGroup& tp,
                                                          int64_t batch, SixteenBitSums sums) {
  return reduce_scatter_sequence(y, tp, batch, "reduce_scatter_to_sequence_parallel_region_forward",
                                 sums);
}

Tensor reduce_scatter_to_sequence_parallel_region_backward(const Tensor& dy,
                                                           comm::ProcessGroup& tp, int64_t batch) {
  return all_gather_sequence(dy, tp, batch,
                             "reduce_scatter_to_sequence_parallel_region_backward");
}

}  // namespace tessera::parallel
