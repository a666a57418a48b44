#include "tessera/io/uring_io.h"

#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/io/piece_queue.h"

namespace tessera::io {
namespace {

// io_uring's read and write lengths are 32-bit; the kernel moves at most 2 GiB - 4 KiB per call
// anyway. A longer piece goes in several calls, each a multiple of any realistic alignment.
constexpr int64_t kMaxTransfer = int64_t{1} << 30;

std::string unavailable_reason(int err) {
  std::string why = std::string("io_uring_queue_init failed: ") + std::strerror(err);
  std::ifstream sysctl("/proc/sys/kernel/io_uring_disabled");
  int disabled = 0;
  if (sysctl >> disabled && disabled != 0) {
    return why + " (kernel.io_uring_disabled is " + std::to_string(disabled) + ")";
  }
  const char* docker = "a seccomp profile, such as Docker's default, blocks io_uring";
  if (err == EPERM) return why + " (" + docker + ")";
  if (err == ENOSYS) return why + " (the kernel has no io_uring, or " + docker + ")";
  return why;
}

class UringIo final : public AsyncIo {
 public:
  explicit UringIo(const AioConfig& config)
      : config_(config), queue_(config.block_size, config.queue_depth), slots_(config.queue_depth) {
    for (int slot = config.queue_depth - 1; slot >= 0; --slot) free_slots_.push_back(slot);
  }

  ~UringIo() override {
    if (thread_.joinable()) {
      queue_.stop();
      thread_.join();  // the thread leaves once no piece is in flight
    }
    if (ring_ready_) io_uring_queue_exit(&ring_);
  }

  // Sets up the ring and starts the thread; false with the reason when io_uring is unavailable.
  bool start(std::string* why_unavailable) {
    const int err = io_uring_queue_init(static_cast<unsigned>(config_.queue_depth), &ring_, 0);
    if (err < 0) {
      *why_unavailable = unavailable_reason(-err);
      return false;
    }
    ring_ready_ = true;
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    const bool supported = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_READ) &&
                           io_uring_opcode_supported(probe, IORING_OP_WRITE);
    if (probe != nullptr) io_uring_free_probe(probe);
    if (!supported) {
      *why_unavailable = "the kernel's io_uring has no IORING_OP_READ/IORING_OP_WRITE (Linux 5.6+)";
      return false;
    }
    thread_ = std::thread([this] { run(); });
    return true;
  }

  Ticket submit(const IoRequest& request) override { return queue_.submit(request); }
  void wait(Ticket ticket) override { queue_.wait(ticket); }
  void wait_all() override { queue_.wait_all(); }
  const char* name() const override { return "io_uring"; }
  double busy_seconds() override { return queue_.busy_seconds(); }

 private:
  // The ring's thread. Blocks in the queue when nothing is in flight, in the ring otherwise.
  void run() {
    std::vector<Piece> batch;
    bool stopping = false;
    while (true) {
      const bool may_start = !stopping && in_flight_ < config_.queue_depth &&
                             (config_.overlap_events || in_flight_ == 0);
      if (may_start) {
        stopping =
            !queue_.take(config_.queue_depth - in_flight_, /*block=*/in_flight_ == 0, &batch);
        for (const Piece& piece : batch) start_piece(piece);
        if (!config_.single_submit && !batch.empty()) submit_ring();
      }
      if (in_flight_ == 0) {
        if (stopping) return;
        continue;
      }
      reap();
    }
  }

  void start_piece(const Piece& piece) {
    TESSERA_CHECK(!free_slots_.empty());
    const int slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[slot].emplace(piece);
    ++in_flight_;
    prepare(slot);
    if (config_.single_submit) submit_ring();
  }

  // Queues the (rest of the) slot's piece in the submission ring.
  void prepare(int slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    TESSERA_CHECK(sqe != nullptr);  // at most queue_depth pieces in flight, one entry each
    const PieceProgress& progress = *slots_[slot];
    const IoRequest& io = progress.piece().io;
    const auto bytes = static_cast<unsigned>(std::min(progress.remaining(), kMaxTransfer));
    const auto offset = static_cast<__u64>(progress.offset());
    if (io.write) {
      io_uring_prep_write(sqe, io.file->fd(), progress.buffer(), bytes, offset);
    } else {
      io_uring_prep_read(sqe, io.file->fd(), progress.buffer(), bytes, offset);
    }
    io_uring_sqe_set_data64(sqe, static_cast<__u64>(slot));
  }

  // io_uring_submit may stop short of the queued entries (an entry that cannot start completes
  // with its error instead); the rest are submitted again, so that every piece counted in
  // flight has a completion to come.
  void submit_ring() {
    while (io_uring_sq_ready(&ring_) > 0) {
      const int ret = io_uring_submit(&ring_);
      if (ret == -EINTR || ret == -EAGAIN) continue;
      TESSERA_CHECK_MSG(ret > 0, std::string("io_uring_submit: ") +
                                     (ret < 0 ? std::strerror(-ret) : "submitted nothing"));
    }
  }

  // Waits for at least one completion and handles every one that is ready.
  void reap() {
    io_uring_cqe* cqe = nullptr;
    int ret;
    do {
      ret = io_uring_wait_cqe(&ring_, &cqe);
    } while (ret == -EINTR);
    TESSERA_CHECK_MSG(ret == 0, std::string("io_uring_wait_cqe: ") + std::strerror(-ret));
    bool resubmit = false;
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      const auto slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
      PieceProgress& progress = *slots_[slot];
      if (!progress.advance(cqe->res)) {
        prepare(slot);
        resubmit = true;
      } else {
        count_transferred(progress.piece().io.write, progress.done());
        queue_.complete(progress);
        slots_[slot].reset();
        free_slots_.push_back(slot);
        --in_flight_;
      }
      ++seen;
    }
    io_uring_cq_advance(&ring_, seen);
    if (resubmit) submit_ring();
  }

  const AioConfig config_;
  PieceQueue queue_;
  io_uring ring_{};
  bool ring_ready_ = false;
  // Owned by the ring's thread: the pieces in flight (user_data is the slot index).
  std::vector<std::optional<PieceProgress>> slots_;
  std::vector<int> free_slots_;
  int in_flight_ = 0;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<AsyncIo> make_uring_io(const AioConfig& config, std::string* why_unavailable) {
  auto engine = std::make_unique<UringIo>(config);
  if (!engine->start(why_unavailable)) return nullptr;
  return engine;
}

}  // namespace tessera::io
