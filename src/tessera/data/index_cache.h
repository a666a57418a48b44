// On-disk cache of dataset indices: 1-D integer arrays in NumPy .npy files (format 1.0), so they
// can be inspected with numpy.load, memory-mapped read-only when loaded.
//
// A cached set is named by a hash of a description string that spells out everything the arrays
// depend on (as Megatron's unique_description_hash); the description is also written next to
// the arrays and compared on load, so a hash collision or a stale file can only cause a rebuild,
// never wrong indices.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "tessera/core/mapped_file.h"

namespace tessera::data {

// 32 lowercase hex digits: a 128-bit hash of `text` (Philox4x32 in a Merkle-Damgard chain; not
// cryptographic, which a cache key does not need).
std::string description_hash(const std::string& text);

// Writes `values` as a little-endian .npy file (dtype '<i8' or '<i2') at `path`, through a
// temporary file renamed into place, so a reader never sees a partial file. Creates missing
// parent directories. Throws tessera::Error naming the path on an I/O error.
void write_npy(const std::string& path, std::span<const int64_t> values);
void write_npy(const std::string& path, std::span<const int16_t> values);

// Writes `text` to `path` atomically (as write_npy). Throws tessera::Error on an I/O error.
void write_text_file(const std::string& path, const std::string& text);
// The file's contents, or std::string() with *exists = false if it does not exist. Throws
// tessera::Error if it exists but cannot be read.
std::string read_text_file(const std::string& path, bool* exists);

// A read-only memory map of a 1-D .npy array of int64 or int16 written by write_npy. The
// constructor checks the magic, the header (dtype, C order, 1-D shape) and that the file holds
// exactly shape[0] elements; anything else throws tessera::Error naming the file. Move-only;
// thread-safe for reads.
class NpyArray {
 public:
  NpyArray() = default;
  explicit NpyArray(const std::string& path);
  NpyArray(NpyArray&& other) noexcept = default;
  NpyArray& operator=(NpyArray&& other) noexcept = default;
  NpyArray(const NpyArray&) = delete;
  NpyArray& operator=(const NpyArray&) = delete;

  // The elements; throws tessera::Error if the stored dtype is not the one asked for.
  std::span<const int64_t> i64() const;
  std::span<const int16_t> i16() const;

 private:
  std::string path_;
  MappedFile file_;
  size_t data_offset_ = 0;
  int64_t count_ = 0;
  int elem_size_ = 0;
};

}  // namespace tessera::data
