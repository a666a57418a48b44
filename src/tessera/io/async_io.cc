#include "tessera/io/async_io.h"

#include <string>

#include "tessera/core/error.h"
#include "tessera/io/thread_pool_io.h"
#include "tessera/io/uring_io.h"

namespace tessera::io {
namespace {

void check_range(const char* key, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    throw Error(std::string("aio.") + key + " is " + std::to_string(value) +
                ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
}

}  // namespace

void validate(const AioConfig& config) {
  // A multiple of 4096 is a multiple of the direct I/O alignment of 512- and 4096-byte sector
  // devices, so every piece of an aligned request starts aligned (PieceQueue rounds a block up
  // on a stricter file system).
  if (config.block_size <= 0 || config.block_size % 4096 != 0) {
    throw Error("aio.block_size is " + std::to_string(config.block_size) +
                ": expected a positive multiple of 4096 bytes (DeepSpeed's default is 1048576)");
  }
  // 1024: well past what an NVMe device needs to be busy, and a ring of that many entries is
  // still small (kernel limit 32768).
  check_range("queue_depth", config.queue_depth, 1, 1024);
  check_range("intra_op_parallelism", config.intra_op_parallelism, 1, 64);
}

std::unique_ptr<AsyncIo> make_async_io(const AioConfig& config, IoBackend backend,
                                       std::string* why_fallback) {
  validate(config);
  if (backend == IoBackend::kThreads) return make_thread_pool_io(config);
  std::string why;
  if (std::unique_ptr<AsyncIo> uring = make_uring_io(config, &why)) return uring;
  if (backend == IoBackend::kUring) throw Error("aio: io_uring is unavailable: " + why);
  if (why_fallback != nullptr) {
    *why_fallback = "io_uring is unavailable, using the thread pool of pread/pwrite: " + why;
  }
  return make_thread_pool_io(config);
}

}  // namespace tessera::io
