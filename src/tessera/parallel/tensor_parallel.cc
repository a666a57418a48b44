#include "tessera/parallel/tensor_parallel.h"

#include <chrono>
#include <utility>

#include "tessera/core/clock.h"
#include "tessera/parallel/mappings.h"

namespace tessera::parallel {
namespace {

// Adds the duration of its scope to a counter.
class ScopedTimer {
 public:
  explicit ScopedTimer(double& total) : total_(total), t0_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() {
    total_ += seconds_since(t0_);
  }

 private:
  double& total_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

TensorParallel::TensorParallel(std::shared_ptr<comm::ProcessGroup> group, bool sequence_parallel,
                               SixteenBitSums sums)
    : group_(std::move(group)), sums_(sums) {
  if (group_) {
    size_ = group_->size();
    rank_ = group_->rank();
  }
  sequence_parallel_ = sequence_parallel && size_ > 1;
}

int64_t TensorParallel::seq_begin(int64_t seq_length) const {
  return sequence_parallel_ ? rank_ * (seq_length / size_) : 0;
}
int64_t TensorParallel::seq_local(int64_t seq_length) const {
  return sequence_parallel_ ? seq_length / size_ : seq_length;
}

Tensor TensorParallel::column_input_forward(const Tensor& x, int64_t batch) const {
  if (!sequence_parallel_) return x;  // copy_to_tp_region: identity forward
  ScopedTimer t(comm_seconds_);
  return gather_from_sequence_parallel_region_forward(x, *group_, batch);
}

Tensor TensorParallel::column_input_backward(Tensor dx, int64_t batch) const {
  if (size_ == 1) return dx;
  ScopedTimer t(comm_seconds_);
  if (sequence_parallel_)
    return gather_from_sequence_parallel_region_backward(dx, *group_, batch, sums_);
  return copy_to_tp_region_backward(std::move(dx), *group_, sums_);
}

Tensor TensorParallel::row_output_forward(Tensor y, int64_t batch) const {
  if (size_ == 1) return y;
  ScopedTimer t(comm_seconds_);
  if (sequence_parallel_)
    return reduce_scatter_to_sequence_parallel_region_forward(y, *group_, batch, sums_);
  return reduce_from_tp_region_forward(std::move(y), *group_, sums_);
}

Tensor TensorParallel::row_output_backward(const Tensor& dy, int64_t batch) const {
  if (!sequence_parallel_) return dy;  // reduce_from_tp_region: identity backward
  ScopedTimer t(comm_seconds_);
  return reduce_scatter_to_sequence_parallel_region_backward(dy, *group_, batch);
}

}  // namespace tessera::parallel
