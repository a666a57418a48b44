#include "tessera/kernels/scratch.h"

#include "tessera/core/memory.h"

namespace tessera::kernels {

ScratchBuffer::~ScratchBuffer() {
  if (ptr_) tracked_free(ptr_, bytes_, MemoryCategory::kOther);
}

void* ScratchBuffer::get(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes > bytes_) {
    // Free first: the old contents are not kept, and holding both would double the peak.
    if (ptr_) tracked_free(ptr_, bytes_, MemoryCategory::kOther);
    ptr_ = nullptr;
    bytes_ = 0;
    ptr_ = tracked_alloc(bytes, MemoryCategory::kOther);
    bytes_ = bytes;
  }
  return ptr_;
}

}  // namespace tessera::kernels
