// Files opened with O_DIRECT, and the alignment O_DIRECT demands of them. Direct I/O moves data
// between the device and the caller's buffer without the page cache, so offload traffic does not
// evict everything else from memory; in exchange the buffer address, file offset and length must
// be multiples of what the file system asks (EINVAL otherwise).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tessera::io {

// O_DIRECT alignment of a file system, in bytes: `memory` for the buffer address, `offset` for
// the file offset and the length of each transfer.
struct DirectIoAlignment {
  int64_t memory = 4096;
  int64_t offset = 4096;
  // One alignment that satisfies both (for buffers whose address and length must be aligned).
  int64_t strictest() const { return memory > offset ? memory : offset; }
};

// The alignment of `path` (a file or a directory): statx(STATX_DIOALIGN)'s dio_mem_align and
// dio_offset_align (Linux 6.1+) when the kernel reports them for it, else the file system's block
// size (statvfs f_bsize) for both, which is at least as strict on the file systems that report
// nothing (and on directories: ext4 reports STATX_DIOALIGN for regular files only). Throws
// tessera::Error naming `path` when it cannot be examined.
DirectIoAlignment direct_io_alignment(const std::string& path);

// `bytes` rounded up to a multiple of `alignment` (> 0); `bytes` >= 0.
int64_t align_up(int64_t bytes, int64_t alignment);

// A file opened for direct I/O (O_DIRECT | O_CLOEXEC), closed by the destructor; move-only. A
// moved-from or default-constructed DirectFile has fd() == -1. The descriptor may be used from
// several threads at once (pread/pwrite, io_uring), which is how AsyncIo uses it.
class DirectFile {
 public:
  // Creates `path` (truncating a file already there) with `bytes` bytes (>= 0) reserved by
  // fallocate, so that a full disk or a file size limit is one tessera::Error here ("cannot
  // reserve <bytes> bytes for <path>: <strerror>"), not a failed write later; the file is then
  // removed. On a file system without fallocate (EOPNOTSUPP) the file is only sized (ftruncate)
  // and nothing is reserved. Throws tessera::Error naming `path` when it cannot be created, or
  // when the file system refuses O_DIRECT.
  static DirectFile create(const std::string& path, int64_t bytes);
  // As create(), but nullopt when the file system refuses O_DIRECT (open(2) fails with EINVAL;
  // some file systems leave `path` created, empty), for callers that then write through the page
  // cache instead.
  static std::optional<DirectFile> create_if_supported(const std::string& path, int64_t bytes);
  // Opens an existing file read-only or read-write. Throws tessera::Error naming `path` when it
  // cannot be opened (missing, permissions, or a file system that refuses O_DIRECT).
  static DirectFile open(const std::string& path, bool writable);

  DirectFile() = default;
  ~DirectFile();
  DirectFile(DirectFile&& other) noexcept;
  DirectFile& operator=(DirectFile&& other) noexcept;
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // Of this file, from statx on the open descriptor (see direct_io_alignment).
  DirectIoAlignment alignment() const { return alignment_; }
  // The size when the file was opened or created; writes past it grow the file, not this figure.
  int64_t size() const { return size_; }
  bool writable() const { return writable_; }

 private:
  DirectFile(int fd, std::string path, bool writable);
  void close();

  int fd_ = -1;
  std::string path_;
  DirectIoAlignment alignment_;
  int64_t size_ = 0;
  bool writable_ = false;
};

}  // namespace tessera::io
