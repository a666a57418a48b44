// ScratchBuffer: a buffer owned by one thread that grows on demand and is kept between calls,
// accounted as MemoryCategory::kOther. Kernels that need a temporary as large as their largest
// call (oneDNN's scratchpad, the fp32 copies of widened GEMM operands) declare one
// `thread_local`, so a steady state of training allocates nothing and touches no fresh pages.
// The pointer from get() stays valid until the next get() on the same buffer that asks for more;
// contents are not preserved across a growth.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::kernels {

class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  // At least `bytes` bytes (at least one), 64-byte aligned (tracked_alloc's alignment).
  void* get(size_t bytes);
  // Room for `count` floats.
  float* floats(int64_t count) {
    return static_cast<float*>(get(static_cast<size_t>(count > 0 ? count : 1) * sizeof(float)));
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tessera::kernels
