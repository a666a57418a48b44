// Host memory for direct I/O: O_DIRECT transfers need the buffer address to be a multiple of the
// file system's memory alignment (DirectIoAlignment::memory, direct_file.h).
#pragma once

#include <cstdint>

#include "tessera/core/memory.h"

namespace tessera::io {

// A zero-filled host buffer of size() bytes whose address is a multiple of alignment() (from
// posix_memalign), counted by the memory accountant in category() for as long as it lives.
// Move-only; a moved-from or default-constructed buffer is empty (data() == nullptr, size() 0).
// Not thread-safe to move or destroy while I/O into it is in flight: the owner waits first.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // `alignment`: a power of two; one below sizeof(void*) (posix_memalign's least) is raised to
  // it, which keeps the smaller one too (statx may report 4 for NVMe). Throws tessera::Error when
  // `bytes` is negative or `alignment` is not a power of two, std::bad_alloc out of memory.
  AlignedBuffer(int64_t bytes, int64_t alignment, MemoryCategory category);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  template <class T>
  T* as() {
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(data_);
  }
  int64_t size() const { return size_; }
  int64_t alignment() const { return alignment_; }
  MemoryCategory category() const { return category_; }

 private:
  void release();

  void* data_ = nullptr;
  int64_t size_ = 0;
  int64_t alignment_ = 0;
  MemoryCategory category_ = MemoryCategory::kOther;
};

}  // namespace tessera::io
