// Asynchronous direct I/O for ZeRO-Infinity style NVMe offload.
//
// The pieces of this folder:
//   aligned_buffer.h   AlignedBuffer: zero-filled host memory aligned for O_DIRECT, accounted.
//   direct_file.h      DirectFile (O_DIRECT files; create reserves the space with fallocate) and
//                      direct_io_alignment (statx STATX_DIOALIGN, else the block size).
//   async_io.h         this file: AioConfig (DeepSpeed's `aio` block), IoRequest, the AsyncIo
//                      engine interface and make_async_io, which picks a backend.
//   uring_io.h         the io_uring backend (liburing): one ring of queue_depth entries driven
//                      by one thread of the engine.
//   thread_pool_io.h   the portable backend: intra_op_parallelism threads doing pread/pwrite.
//   piece_queue.h      what both backends share: requests cut into block_size pieces, the queue
//                      of pieces not yet started, each request's outstanding pieces and error.
//   direct_file_writer.h  DirectFileWriter: a file of known size written from pieces at any
//                      offsets (a checkpoint's rank file), whole blocks staged and written on an
//                      engine of its own, the blocks two pieces share held until complete.
//
// Use: open or create a DirectFile, allocate AlignedBuffers with the file's alignment(), then
//   auto io = make_async_io(config, IoBackend::kAuto, &why);
//   AsyncIo::Ticket t = io->submit({&file, buffer.data(), bytes, offset, /*write=*/true});
//   ... compute while the transfer runs ...
//   io->wait(t);  // throws tessera::Error if any piece failed
// Transfers progress in the engine's own threads between submit() and wait(); the caller keeps
// the file and the buffer alive and untouched until then.
//
// DeepSpeed's `aio` keys map as follows. block_size: the size of a piece. queue_depth: the most
// pieces in flight at once (both backends). intra_op_parallelism: the number of threads of the
// thread-pool backend (the io_uring backend needs one, however deep its queue). single_submit:
// io_uring submits each piece with its own io_uring_submit call instead of one per batch.
// overlap_events: false makes io_uring wait for a whole batch of pieces to complete before
// starting the next (true keeps the queue full as pieces complete). The last two have no meaning
// for threads, which ignore them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tessera/io/aligned_buffer.h"
#include "tessera/io/direct_file.h"

namespace tessera::io {

// DeepSpeed's `aio` config block with its defaults; validate() states the accepted ranges.
struct AioConfig {
  int64_t block_size = 1 << 20;
  int queue_depth = 8;
  int intra_op_parallelism = 1;
  bool single_submit = false;
  bool overlap_events = true;
};

// Throws one tessera::Error for the first out-of-range field, naming its DeepSpeed key:
// block_size a positive multiple of 4096, queue_depth 1..1024, intra_op_parallelism 1..64,
// e.g. "aio.queue_depth is 0: expected an integer from 1 to 1024".
void validate(const AioConfig& config);

enum class IoBackend { kAuto, kUring, kThreads };

// One read or write of `bytes` at `offset` of `file`, into or from `buffer`. The buffer address
// must be a multiple of file->alignment().memory, offset and bytes multiples of .offset; a write
// needs a writable file. submit() checks both (tessera::Error naming the file and the value).
// A read past the end of the file is a "short read" error at wait().
struct IoRequest {
  const DirectFile* file = nullptr;
  void* buffer = nullptr;
  int64_t bytes = 0;
  int64_t offset = 0;
  bool write = false;
};

// An asynchronous I/O engine. submit() cuts a request into pieces of block_size bytes (rounded
// up to the file's offset alignment if that is larger) and starts them with at most queue_depth
// pieces in flight; wait(ticket) returns when every piece of that request has completed, and
// throws tessera::Error if any failed, with the message of the failed piece at the lowest offset:
//   "<read|write> of <path> at offset <off> (<n> bytes) failed: <strerror(errno)>"
//   "short read of <path> at offset <off>: got <k> of <n> bytes"        (end of file)
// (<off> and <n> are the piece's, or what remained of it after a partial transfer). A failed
// piece does not stop the others, and the engine stays usable. Partial transfers continue where
// they stopped; EINTR and EAGAIN are retried.
//
// Not thread-safe: one thread submits and waits (the offload code owns one engine per rank).
// The destructor waits for the pieces already started and drops those not started yet.
class AsyncIo {
 public:
  using Ticket = int64_t;
  virtual ~AsyncIo() = default;

  // Returns at once with a ticket (> 0) for wait(). A request of 0 bytes completes at once.
  virtual Ticket submit(const IoRequest& request) = 0;
  // A ticket already waited for (alone or by wait_all) returns at once; a ticket this engine
  // never issued is a bug (TESSERA_CHECK).
  virtual void wait(Ticket ticket) = 0;
  // Waits for every request submitted so far; if any failed, throws the error of the first
  // (lowest ticket) and says how many others failed.
  virtual void wait_all() = 0;
  virtual const char* name() const = 0;  // "io_uring" or "threads"
  // Wall time since construction during which at least one piece was queued or in flight
  // (the engine was busy), in seconds: with the caller's own waiting time, the share of I/O
  // that overlapped other work.
  virtual double busy_seconds() = 0;

  // Bytes moved by completed system calls since construction (a failed piece counts what it
  // moved before failing); complete for a request once wait() for it has returned.
  int64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  int64_t bytes_written() const { return bytes_written_.load(std::memory_order_relaxed); }

 protected:
  // Backends call this from any thread.
  void count_transferred(bool write, int64_t bytes) {
    (write ? bytes_written_ : bytes_read_).fetch_add(bytes, std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> bytes_read_{0};
  std::atomic<int64_t> bytes_written_{0};
};

// The engine for `backend` (the config validated first). kUring: io_uring through liburing;
// throws tessera::Error naming the reason when io_uring is unavailable. kThreads: the thread
// pool. kAuto: io_uring unless setting up a ring fails (ENOSYS, EPERM: Docker's default seccomp
// profile blocks io_uring, as does kernel.io_uring_disabled; or a kernel without IORING_OP_READ),
// in which case the thread pool, and if `why_fallback` is non-null one line saying why there
// (left untouched otherwise).
std::unique_ptr<AsyncIo> make_async_io(const AioConfig& config, IoBackend backend,
                                       std::string* why_fallback = nullptr);

// Test hook for fault injection on the thread-pool backend: when set, called (from a worker
// thread) before each piece; a non-zero return is that piece failing with that errno, without a
// system call. Process-wide, for every thread-pool engine; nullptr clears it. The function must
// be thread-safe when intra_op_parallelism > 1.
void set_thread_io_fault_injector(std::function<int(const IoRequest& piece)> injector);

}  // namespace tessera::io
