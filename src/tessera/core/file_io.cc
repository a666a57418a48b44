#include "tessera/core/file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "tessera/core/error.h"

namespace tessera {

std::string read_file(const std::string& path, const std::string& what) {
  if (path.empty()) throw Error(what + " is not given: expected a file path");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error("cannot read " + what + " '" + path + "': it is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + what + " '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("cannot read " + what + " '" + path + "': read error");
  return ss.str();
}

AtomicFile::AtomicFile(std::string path, const std::string& tmp_suffix)
    : path_(std::move(path)), tmp_(path_ + tmp_suffix) {
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (file_ == nullptr) throw Error(tmp_ + ": cannot create: " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  std::remove(tmp_.c_str());
}

void AtomicFile::fail(const std::string& what) {
  const std::string msg = tmp_ + ": " + what + ": " + std::strerror(errno);
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
  std::remove(tmp_.c_str());
  throw Error(msg);
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes) fail("write failed");
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t bytes) {
  // What write() buffered goes first, so the two kinds of writes land in the order made.
  if (std::fflush(file_) != 0) fail("write failed");
  const int fd = ::fileno(file_);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write failed at offset " + std::to_string(offset));
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  // fsync before rename: otherwise a power loss can leave `path` naming an empty file.
  const bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed) fail("write failed");
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot rename to " + path_);
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  AtomicFile out(path);
  out.write(bytes.data(), bytes.size());
  out.commit();
}

void copy_file_atomically(const std::string& from, const std::string& to) {
  write_file_atomically(to, read_file(from, "file to copy"));
}

}  // namespace tessera
