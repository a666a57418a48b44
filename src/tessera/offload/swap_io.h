// One rank's swap I/O: the asynchronous direct-I/O engine (io/async_io.h) that its offloaded
// optimizer state and parameters share, and the counters the step log and the metrics file
// report. Not thread-safe: the training thread submits and waits.
//
// The hidden share of I/O is measured, not estimated: `busy` is the wall time during which at
// least one request was in flight (the engine's own accounting), `exposed` the time the training
// thread spent blocked waiting for one; hidden = 1 - exposed / busy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/io/async_io.h"

namespace tessera::offload {

class SwapIo {
 public:
  SwapIo(const io::AioConfig& config, io::IoBackend backend);

  io::AsyncIo::Ticket read(const io::DirectFile& file, void* buffer, int64_t bytes, int64_t offset);
  io::AsyncIo::Ticket write(const io::DirectFile& file, const void* buffer, int64_t bytes,
                            int64_t offset);
  // Blocks until the request completed (rethrowing its error); the time blocked is exposed I/O.
  void wait(io::AsyncIo::Ticket ticket);
  void wait_all();

  struct Counters {
    int64_t read_bytes = 0, write_bytes = 0;
    double busy_s = 0;     // wall time with I/O in flight
    double exposed_s = 0;  // of it, time the training thread waited
    // The share of I/O time overlapped with other work (0 without I/O).
    double hidden_fraction() const {
      return busy_s > 0 ? std::max(0.0, 1.0 - exposed_s / busy_s) : 0.0;
    }
  };
  Counters counters() const;
  // "io_uring" or "threads", and why the engine fell back to threads (empty if it did not).
  const char* backend() const { return engine_->name(); }
  const std::string& fallback_reason() const { return fallback_; }

 private:
  std::unique_ptr<io::AsyncIo> engine_;
  std::string fallback_;
  double exposed_s_ = 0;
};

}  // namespace tessera::offload
