#include "tessera/data/index_cache.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/philox.h"

namespace tessera::data {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";  // 6 bytes, then version 1.0

std::string npy_header(const char* descr, int64_t count) {
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" +
                     std::to_string(count) + ",), }";
  // magic (6) + version (2) + header length (2) + dict, padded with spaces and ended by '\n' to a
  // multiple of 64 bytes, so the data (and every element) is aligned in a mapping.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string out(kNpyMagic, 6);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  return out + dict;
}

// Writes `head` then `data` to `path` through path.tmp.<pid>, fsync and a rename.
void write_atomically(const std::string& path, const std::string& head, const void* data,
                      size_t size) {
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec)
    throw Error(parent.string() + ": cannot create the index cache directory (" + ec.message() +
                "); choose a writable one with --data-cache-path");
  AtomicFile file(path, ".tmp." + std::to_string(::getpid()));
  file.write(head.data(), head.size());
  file.write(data, size);
  file.commit();
}

}  // namespace

std::string description_hash(const std::string& text) {
  // Each 8-byte chunk is folded into the state, which is then permuted by Philox keyed by the
  // chunk's position; the length goes in last so "a" and "a\0" differ.
  std::array<uint32_t, 4> state = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
  const size_t n = text.size();
  for (size_t i = 0; i <= n; i += 8) {
    uint32_t w[2] = {0, 0};
    std::memcpy(w, text.data() + i, std::min<size_t>(8, n - std::min(i, n)));
    state[0] ^= w[0];
    state[1] ^= w[1];
    if (i + 8 > n) {
      state[2] ^= static_cast<uint32_t>(n);
      state[3] ^= static_cast<uint32_t>(static_cast<uint64_t>(n) >> 32);
    }
    state = philox4x32(state, {static_cast<uint32_t>(i), 0x9e3779b9u});
  }
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%08x%08x%08x%08x", state[0], state[1], state[2], state[3]);
  return hex;
}

void write_npy(const std::string& path, std::span<const int64_t> values) {
  write_atomically(path, npy_header("<i8", static_cast<int64_t>(values.size())), values.data(),
                   values.size_bytes());
}

void write_npy(const std::string& path, std::span<const int16_t> values) {
  write_atomically(path, npy_header("<i2", static_cast<int64_t>(values.size())), values.data(),
                   values.size_bytes());
}

void write_text_file(const std::string& path, const std::string& text) {
  write_atomically(path, text, nullptr, 0);
}

std::string read_text_file(const std::string& path, bool* exists) {
  std::error_code ec;
  *exists = std::filesystem::is_regular_file(path, ec);
  if (!*exists) return std::string();
  return read_file(path, "cached index description");
}

NpyArray::NpyArray(const std::string& path) : path_(path), file_(path, "cached index") {
  const size_t map_size = file_.size();
  const auto bad = [&](const std::string& why) {
    return Error(path + ": not a cached index written by Tessera (" + why +
                 "); delete the file to rebuild it");
  };
  if (map_size == 0) throw bad("empty");
  const unsigned char* p = file_.data();
  if (map_size < 10 || std::memcmp(p, kNpyMagic, 6) != 0 || p[6] != 1 || p[7] != 0)
    throw bad("no .npy 1.0 magic");
  const size_t header_len = p[8] | (static_cast<size_t>(p[9]) << 8);
  data_offset_ = 10 + header_len;
  if (data_offset_ > map_size) throw bad("truncated header");
  const std::string header(reinterpret_cast<const char*>(p) + 10, header_len);
  for (const auto& [descr, size] : {std::pair{"<i8", 8}, std::pair{"<i2", 2}}) {
    const std::string prefix =
        std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
    if (header.compare(0, prefix.size(), prefix) == 0) {
      elem_size_ = size;
      const char* digits = header.c_str() + prefix.size();
      char* end = nullptr;
      count_ = std::strtoll(digits, &end, 10);
      if (end == digits || std::strncmp(end, ",), }", 5) != 0 || count_ < 0)
        throw bad("unexpected shape");
    }
  }
  if (elem_size_ == 0) throw bad("unexpected dtype");
  if (npy_header(elem_size_ == 8 ? "<i8" : "<i2", count_).size() != data_offset_ ||
      map_size - data_offset_ != static_cast<size_t>(count_) * elem_size_)
    throw bad("size does not match the header");
}

std::span<const int64_t> NpyArray::i64() const {
  if (elem_size_ != 8) throw Error(path_ + ": cached index is not int64");
  return {reinterpret_cast<const int64_t*>(file_.data() + data_offset_),
          static_cast<size_t>(count_)};
}

std::span<const int16_t> NpyArray::i16() const {
  if (elem_size_ != 2) throw Error(path_ + ": cached index is not int16");
  return {reinterpret_cast<const int16_t*>(file_.data() + data_offset_),
          static_cast<size_t>(count_)};
}

}  // namespace tessera::data
