#include "tessera/io/thread_pool_io.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "tessera/io/piece_queue.h"

namespace tessera::io {
namespace {

// The fault injector: a flag read by every piece, the function behind a lock only when set.
std::atomic<bool> g_injector_set{false};
std::mutex g_injector_mutex;
std::function<int(const IoRequest&)> g_injector;

int injected_errno(const IoRequest& piece) {
  if (!g_injector_set.load(std::memory_order_acquire)) return 0;
  std::function<int(const IoRequest&)> injector;
  {
    std::lock_guard<std::mutex> lock(g_injector_mutex);
    injector = g_injector;
  }
  return injector ? injector(piece) : 0;
}

class ThreadPoolIo final : public AsyncIo {
 public:
  explicit ThreadPoolIo(const AioConfig& config) : queue_(config.block_size, config.queue_depth) {
    const int threads = std::max(1, config.intra_op_parallelism);
    workers_.reserve(threads);
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }

  ~ThreadPoolIo() override {
    queue_.stop();
    for (std::thread& worker : workers_) worker.join();
  }

  Ticket submit(const IoRequest& request) override { return queue_.submit(request); }
  void wait(Ticket ticket) override { queue_.wait(ticket); }
  void wait_all() override { queue_.wait_all(); }
  const char* name() const override { return "threads"; }
  double busy_seconds() override { return queue_.busy_seconds(); }

 private:
  void work() {
    std::vector<Piece> pieces;
    while (queue_.take(1, /*block=*/true, &pieces)) {
      for (const Piece& piece : pieces) run(piece);
    }
  }

  void run(const Piece& piece) {
    PieceProgress progress(piece);
    if (const int err = injected_errno(piece.io); err != 0) {
      progress.fail(err);
    } else {
      const int fd = piece.io.file->fd();
      bool finished = false;
      while (!finished) {
        const ssize_t n =
            piece.io.write
                ? ::pwrite(fd, progress.buffer(), progress.remaining(), progress.offset())
                : ::pread(fd, progress.buffer(), progress.remaining(), progress.offset());
        finished = progress.advance(n < 0 ? -static_cast<int64_t>(errno) : n);
      }
    }
    count_transferred(piece.io.write, progress.done());
    queue_.complete(progress);
  }

  PieceQueue queue_;
  std::vector<std::thread> workers_;
};

}  // namespace

void set_thread_io_fault_injector(std::function<int(const IoRequest& piece)> injector) {
  std::lock_guard<std::mutex> lock(g_injector_mutex);
  g_injector = std::move(injector);
  g_injector_set.store(static_cast<bool>(g_injector), std::memory_order_release);
}

std::unique_ptr<AsyncIo> make_thread_pool_io(const AioConfig& config) {
  return std::make_unique<ThreadPoolIo>(config);
}

}  // namespace tessera::io
