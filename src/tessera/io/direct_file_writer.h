// Writing a file of known size through O_DIRECT when its bytes arrive in pieces, in any order
// and at any offsets: the way a checkpoint's rank file (checkpoint/rank_file_writer.h) is filled,
// slice by slice, from state that may not fit in memory. Through the page cache such a file is
// written at the cache's pace, not the disk's: on a project machine (ext4 on a virtio disk)
// `dd bs=64M count=160 conv=fsync` wrote 10 GiB in 45 s buffered and in 7.3 s with
// oflag=direct, and the streamed save of a 21 GB checkpoint ran at 0.26 GB/s (docs/offload.md).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/io/aligned_buffer.h"
#include "tessera/io/async_io.h"
#include "tessera/io/direct_file.h"

namespace tessera::io {

// Contract:
// - open() takes an existing file (the caller's temporary: it keeps naming, fsync and rename,
//   e.g. through core/file_io.h's AtomicFile), truncates it and reserves `size` bytes with
//   fallocate (DirectFile::create), so a full disk is one error there, before any data moves.
//   It returns nullptr when the file system refuses O_DIRECT, or asks for an alignment above
//   kMaxAlignment (a network file system reporting its 1 MiB block size, say: every block two
//   pieces share would be held whole), leaving the file reserved: the caller writes through the
//   page cache instead.
// - write_at() hands over bytes [offset, offset + bytes) of the file, inside [0, size); every
//   byte of the file is handed over at most once (bytes never handed over read as zero). The
//   data is copied before write_at() returns, so the caller may reuse its memory at once. The
//   part of a piece that covers whole alignment blocks is copied into a staging buffer and written
//   asynchronously (AsyncIo, io_uring or the thread pool); the bytes of blocks the piece covers
//   only partly are kept until the block is complete (then written) or until finish().
// - finish() waits for every write, writes the incomplete blocks (zeros where nothing came) and
//   cuts the file to `size`. It does not fsync: the caller's commit does (fsync on any
//   descriptor of the file covers these writes).
// - Errors are tessera::Error naming the file, the offset and errno (async_io.h's messages). After
//   an error the writer is unusable; destroying it waits for what is in flight.
// Memory: `staging_buffers` buffers of `staging_bytes` (the file's size at most), plus one
// alignment block for each block that is partly written and for each of the last
// kCompletedBlocksInFlight complete ones still being written. Not thread-safe.
class DirectFileWriter {
 public:
  static constexpr int64_t kMaxAlignment = 64 << 10;
  static constexpr size_t kCompletedBlocksInFlight = 64;

  struct Options {
    AioConfig aio;  // DeepSpeed's `aio` defaults: 1 MiB pieces, queue depth 8
    IoBackend backend = IoBackend::kAuto;
    int staging_buffers = 4;  // in flight at once, at least 2
    int64_t staging_bytes = 8 << 20;
  };

  static std::unique_ptr<DirectFileWriter> open(const std::string& path, int64_t size,
                                                const Options& options);
  ~DirectFileWriter();
  DirectFileWriter(const DirectFileWriter&) = delete;
  DirectFileWriter& operator=(const DirectFileWriter&) = delete;

  void write_at(int64_t offset, const void* data, int64_t bytes);
  void finish();

  const std::string& path() const { return file_.path(); }
  const char* backend() const { return io_->name(); }

 private:
  struct Staging {
    AlignedBuffer buffer;
    AsyncIo::Ticket pending = -1;
  };
  struct PartialBlock {
    AlignedBuffer buffer;  // one alignment block
    int64_t filled = 0;    // bytes handed over so far
  };

  DirectFileWriter(DirectFile file, int64_t size, const Options& options);
  // Copies `bytes` (block-aligned offset and length) into staging buffers and submits them.
  void write_whole_blocks(int64_t offset, const char* data, int64_t bytes);
  // Bytes of one block that the piece covers only partly.
  void write_partial(int64_t offset, const char* data, int64_t bytes);
  Staging& free_staging();

  DirectFile file_;
  int64_t size_ = 0;
  int64_t block_ = 0;  // the file's O_DIRECT offset alignment
  Options options_;
  std::vector<Staging> staging_;
  size_t next_staging_ = 0;
  std::map<int64_t, PartialBlock> partial_;      // by block offset
  // Complete blocks being written (oldest first), each kept until its write is done.
  std::deque<std::pair<AlignedBuffer, AsyncIo::Ticket>> completed_blocks_;
  // Declared last: destroyed first, so it waits for its transfers while the buffers still exist.
  std::unique_ptr<AsyncIo> io_;
  bool finished_ = false;
};

}  // namespace tessera::io
