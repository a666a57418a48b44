// A whole file mapped read-only into memory, for the readers of indexed datasets, cached dataset
// indices and safetensors files.
#pragma once

#include <cstddef>
#include <string>

namespace tessera {

// Owns the mapping: move-only, unmapped on destruction. An empty file maps to data() == nullptr
// and size() == 0 (mmap rejects a zero length). Reads are thread-safe.
class MappedFile {
 public:
  MappedFile() = default;
  // Throws tessera::Error naming `path` when it cannot be opened ("<path>: cannot open <what>:
  // <reason>"), stat'ed or mapped.
  MappedFile(const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return static_cast<const unsigned char*>(map_); }
  size_t size() const { return size_; }

 private:
  void release();

  void* map_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessera
