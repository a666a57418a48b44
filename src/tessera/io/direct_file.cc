#include "tessera/io/direct_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::io {
namespace {

#ifdef STATX_DIOALIGN
constexpr unsigned kStatxMask = STATX_DIOALIGN;
#else
constexpr unsigned kStatxMask = 0;  // headers older than Linux 6.1: the block size it is
#endif

// The alignment of the open descriptor `fd` when fd >= 0, else of `path`.
DirectIoAlignment alignment_of(int fd, const std::string& path) {
  auto fail = [&](const char* call) {
    return Error("cannot find the direct I/O alignment of " + path + ": " + call + ": " +
                 std::strerror(errno));
  };
  struct statx stx {};
  const int rc = fd >= 0 ? ::statx(fd, "", AT_EMPTY_PATH, kStatxMask, &stx)
                         : ::statx(AT_FDCWD, path.c_str(), 0, kStatxMask, &stx);
  if (rc != 0) throw fail("statx");
#ifdef STATX_DIOALIGN
  // A zero dio_mem_align means the file takes no direct I/O at all; opening it with O_DIRECT
  // says so more clearly than an alignment could.
  if ((stx.stx_mask & STATX_DIOALIGN) != 0 && stx.stx_dio_mem_align > 0 &&
      stx.stx_dio_offset_align > 0) {
    return {static_cast<int64_t>(stx.stx_dio_mem_align),
            static_cast<int64_t>(stx.stx_dio_offset_align)};
  }
#endif
  struct statvfs vfs {};
  const int vrc = fd >= 0 ? ::fstatvfs(fd, &vfs) : ::statvfs(path.c_str(), &vfs);
  if (vrc != 0) throw fail("statvfs");
  const auto block = static_cast<int64_t>(vfs.f_bsize);
  return {block, block};
}

Error open_failure(const std::string& path, const char* what, int err) {
  std::string message =
      "cannot " + std::string(what) + " " + path + " for direct I/O: " + std::strerror(err);
  // open(2) reports a file system without O_DIRECT support as EINVAL.
  if (err == EINVAL) message += " (the file system does not support O_DIRECT)";
  return Error(message);
}

}  // namespace

DirectIoAlignment direct_io_alignment(const std::string& path) { return alignment_of(-1, path); }

int64_t align_up(int64_t bytes, int64_t alignment) {
  TESSERA_CHECK(bytes >= 0 && alignment > 0);
  return (bytes + alignment - 1) / alignment * alignment;
}

DirectFile::DirectFile(int fd, std::string path, bool writable)
    : fd_(fd), path_(std::move(path)), writable_(writable) {}

DirectFile DirectFile::create(const std::string& path, int64_t bytes) {
  std::optional<DirectFile> file = create_if_supported(path, bytes);
  if (!file) throw open_failure(path, "create", EINVAL);
  return std::move(*file);
}

std::optional<DirectFile> DirectFile::create_if_supported(const std::string& path, int64_t bytes) {
  if (bytes < 0) {
    throw Error("cannot create " + path + " with " + std::to_string(bytes) +
                " bytes: expected a size of 0 bytes or more");
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EINVAL) return std::nullopt;
  if (fd < 0) throw open_failure(path, "create", errno);
  DirectFile file(fd, path, /*writable=*/true);
  if (bytes > 0) {
    int rc;
    do {
      rc = ::fallocate(fd, 0, 0, bytes);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno == EOPNOTSUPP) rc = ::ftruncate(fd, bytes);
    if (rc != 0) {
      const int err = errno;
      file.close();
      ::unlink(path.c_str());  // a half-reserved file would only fail later
      throw Error("cannot reserve " + std::to_string(bytes) + " bytes for " + path + ": " +
                  std::strerror(err));
    }
  }
  file.size_ = bytes;
  file.alignment_ = alignment_of(fd, path);
  return file;
}

DirectFile DirectFile::open(const std::string& path, bool writable) {
  const int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_DIRECT | O_CLOEXEC);
  if (fd < 0) throw open_failure(path, "open", errno);
  DirectFile file(fd, path, writable);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error("cannot stat " + path + ": " + std::strerror(errno));
  file.size_ = static_cast<int64_t>(st.st_size);
  file.alignment_ = alignment_of(fd, path);
  return file;
}

DirectFile::~DirectFile() { close(); }

DirectFile::DirectFile(DirectFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      alignment_(other.alignment_),
      size_(other.size_),
      writable_(other.writable_) {}

DirectFile& DirectFile::operator=(DirectFile&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    alignment_ = other.alignment_;
    size_ = other.size_;
    writable_ = other.writable_;
  }
  return *this;
}

void DirectFile::close() {
  // close(2) of a regular file reports nothing new after EINTR and must not be retried on Linux.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace tessera::io
