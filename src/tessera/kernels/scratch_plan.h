// ScratchPlan: the theory of the kernels' scratch memory (MemoryCategory::kOther) over a sequence
// of kernel calls, without running them: the memory report's "other" figure (train/memory_report.h)
// and anything else that must know it before a run.
//
// The kernels hold two kinds of scratch. Grow-only buffers (ScratchBuffer, one per thread_local
// declaration, type instantiation and thread) keep their largest size for the rest of the
// process; temporaries (the norms' partial sums) live for one call. Each kernel that holds
// scratch has a plan_* function beside it (gemm.h, linear.h, norms.h) that records, for one call
// with given shapes, what that call asks of each of its buffers, from the same sizing code the
// kernel allocates with. After a sequence of calls the plan's peak is every buffer at its largest
// plus the largest temporary: the peak of kOther over the calls when the buffers reach their
// largest before the largest temporary is taken (a transformer step's last norm backward comes
// after every product of its shapes), and otherwise an upper bound.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tessera::kernels {

class ScratchPlan {
 public:
  // The grow-only buffer named `buffer` (one name per thread_local declaration, instantiation
  // and thread) is asked for `bytes` (ScratchBuffer::get's argument; it keeps the largest).
  void grow(const std::string& buffer, int64_t bytes);
  // A temporary of `bytes`, freed before the call returns.
  void temporary(int64_t bytes);

  // Every buffer at its largest plus the largest temporary, in bytes.
  int64_t peak_bytes() const;
  // The buffers at their largest (for explanations and tests).
  const std::map<std::string, int64_t>& buffers() const { return buffers_; }
  int64_t largest_temporary() const { return largest_temporary_; }

 private:
  std::map<std::string, int64_t> buffers_;
  int64_t largest_temporary_ = 0;
};

}  // namespace tessera::kernels
