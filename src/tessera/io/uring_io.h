// The io_uring AsyncIo backend (liburing).
#pragma once

#include <memory>
#include <string>

#include "tessera/io/async_io.h"

namespace tessera::io {

// One ring of queue_depth entries, driven by one thread of the engine: it starts queued pieces
// with io_uring_prep_read/io_uring_prep_write while fewer than queue_depth are in flight, reaps
// completions, and resubmits the remainder of a partial transfer. single_submit: one
// io_uring_submit call per piece instead of one per batch; overlap_events false: a new batch
// starts only when the previous one has completed. New pieces submitted while others are in
// flight start when the next completion arrives. The config must be valid (validate()).
//
// Returns nullptr, with one line in `why_unavailable` (strerror and the likely cause), when no
// ring can be set up: io_uring_queue_init fails (ENOSYS, EPERM from a seccomp profile such as
// Docker's default or from kernel.io_uring_disabled, ENOMEM) or the kernel lacks IORING_OP_READ
// and IORING_OP_WRITE (before Linux 5.6).
std::unique_ptr<AsyncIo> make_uring_io(const AioConfig& config, std::string* why_unavailable);

}  // namespace tessera::io
