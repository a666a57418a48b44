#include "tessera/kernels/scratch_plan.h"

#include <algorithm>

namespace tessera::kernels {

void ScratchPlan::grow(const std::string& buffer, int64_t bytes) {
  // ScratchBuffer::get(0) takes one byte, as a zero-sized request still returns a pointer.
  int64_t& largest = buffers_[buffer];
  largest = std::max({largest, bytes, int64_t{1}});
}

void ScratchPlan::temporary(int64_t bytes) {
  largest_temporary_ = std::max(largest_temporary_, bytes);
}

int64_t ScratchPlan::peak_bytes() const {
  int64_t total = largest_temporary_;
  for (const auto& [name, bytes] : buffers_) total += bytes;
  return total;
}

}  // namespace tessera::kernels
