#include "tessera/offload/swap_io.h"

#include <algorithm>

#include "tessera/core/clock.h"

namespace tessera::offload {

SwapIo::SwapIo(const io::AioConfig& config, io::IoBackend backend)
    : engine_(io::make_async_io(config, backend, &fallback_)) {}

io::AsyncIo::Ticket SwapIo::read(const io::DirectFile& file, void* buffer, int64_t bytes,
                                 int64_t offset) {
  return engine_->submit(io::IoRequest{&file, buffer, bytes, offset, false});
}

io::AsyncIo::Ticket SwapIo::write(const io::DirectFile& file, const void* buffer, int64_t bytes,
                                  int64_t offset) {
  // The engine only reads a write's buffer.
  return engine_->submit(io::IoRequest{&file, const_cast<void*>(buffer), bytes, offset, true});
}

void SwapIo::wait(io::AsyncIo::Ticket ticket) {
  const auto t0 = Clock::now();
  engine_->wait(ticket);
  exposed_s_ += seconds_since(t0);
}

void SwapIo::wait_all() {
  const auto t0 = Clock::now();
  engine_->wait_all();
  exposed_s_ += seconds_since(t0);
}

SwapIo::Counters SwapIo::counters() const {
  Counters c;
  c.read_bytes = engine_->bytes_read();
  c.write_bytes = engine_->bytes_written();
  c.busy_s = engine_->busy_seconds();
  c.exposed_s = std::min(exposed_s_, c.busy_s);
  return c;
}

}  // namespace tessera::offload
