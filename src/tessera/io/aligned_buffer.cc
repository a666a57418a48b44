#include "tessera/io/aligned_buffer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::io {

AlignedBuffer::AlignedBuffer(int64_t bytes, int64_t alignment, MemoryCategory category)
    : alignment_(std::max<int64_t>(alignment, sizeof(void*))), category_(category) {
  if (bytes < 0) {
    throw Error("aligned buffer of " + std::to_string(bytes) +
                " bytes: expected a size of 0 bytes or more");
  }
  if (alignment <= 0 || (alignment & (alignment - 1)) != 0) {
    throw Error("aligned buffer alignment " + std::to_string(alignment) +
                ": expected a power of two");
  }
  if (bytes == 0) return;
  void* p = nullptr;
  if (::posix_memalign(&p, static_cast<size_t>(alignment_), static_cast<size_t>(bytes)) != 0) {
    throw std::bad_alloc();
  }
  std::memset(p, 0, static_cast<size_t>(bytes));
  data_ = p;
  size_ = bytes;
  MemoryAccountant::instance().on_alloc(category_, size_);
}

AlignedBuffer::~AlignedBuffer() { release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      alignment_(std::exchange(other.alignment_, 0)),
      category_(other.category_) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    alignment_ = std::exchange(other.alignment_, 0);
    category_ = other.category_;
  }
  return *this;
}

void AlignedBuffer::release() {
  if (data_ == nullptr) return;
  MemoryAccountant::instance().on_free(category_, size_);
  std::free(data_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace tessera::io
