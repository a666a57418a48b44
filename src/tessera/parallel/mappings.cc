#include "tessera/parallel/mappings.h"

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

Tensor all_reduce_sum(Tensor t, comm::ProcessGroup& tp, const char* what) {
  check_float(t, what);
  if (tp.size() == 1) return t;
  tp.all_reduce(t, comm::ReduceOp::kSum).wait();
  return t;
}

// (S/n, ...) on every member -> (S, ...), slices in rank order.
Tensor all_gather_dim0(const Tensor& x, comm::ProcessGroup& tp, const char* what) {
  check_float(x, what);
  if (x.ndim() < 1) throw Error(std::string(what) + ": tensor has no dimensions");
  if (tp.size() == 1) return x.clone(x.category());
  Shape full = x.shape();
  full[0] *= tp.size();
  Tensor out = Tensor::empty(full, x.dtype(), x.category());
  tp.all_gather(x, out).wait();
  return out;
}

// (S, ...) on every member -> (S/n, ...) = this member's slice of the sum.
Tensor reduce_scatter_dim0(const Tensor& x, comm::ProcessGroup& tp, const char* what) {
  check_float(x, what);
  if (x.ndim() < 1) throw Error(std::string(what) + ": tensor has no dimensions");
  if (x.dim(0) % tp.size() != 0) {
    throw Error(std::string(what) + ": dim 0 of " + shape_str(x.shape()) +
                " is not divisible by the tensor-parallel size " + std::to_string(tp.size()));
  }
  if (tp.size() == 1) return x.clone(x.category());
  Shape part = x.shape();
  part[0] /= tp.size();
  Tensor out = Tensor::empty(part, x.dtype(), x.category());
  tp.reduce_scatter(x, out, comm::ReduceOp::kSum).wait();
  return out;
}

}  // namespace

Tensor copy_to_tp_region_backward(Tensor dx, comm::ProcessGroup& tp) {
  return all_reduce_sum(std::move(dx), tp, "copy_to_tp_region_backward");
}

Tensor reduce_from_tp_region_forward(Tensor y, comm::ProcessGroup& tp) {
  return all_reduce_sum(std::move(y), tp, "reduce_from_tp_region_forward");
}

Tensor gather_from_sequence_parallel_region_forward(const Tensor& x, comm::ProcessGroup& tp) {
  return all_gather_dim0(x, tp, "gather_from_sequence_parallel_region_forward");
}

Tensor gather_from_sequence_parallel_region_backward(const Tensor& dy, comm::ProcessGroup& tp) {
  return reduce_scatter_dim0(dy, tp, "gather_from_sequence_parallel_region_backward");
}

Tensor reduce_scatter_to_sequence_parallel_region_forward(const Tensor& y, comm::ProcessGroup& tp) {
  return reduce_scatter_dim0(y, tp, "reduce_scatter_to_sequence_parallel_region_forward");
}

Tensor reduce_scatter_to_sequence_parallel_region_backward(const Tensor& dy,
                                                           comm::ProcessGroup& tp) {
  return all_gather_dim0(dy, tp, "reduce_scatter_to_sequence_parallel_region_backward");
}

}  // namespace tessera::parallel
