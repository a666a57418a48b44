// The portable AsyncIo backend: a fixed set of threads doing pread/pwrite on the queued pieces.
#pragma once

#include <memory>

#include "tessera/io/async_io.h"

namespace tessera::io {

// intra_op_parallelism worker threads (at least 1), each taking one piece at a time from the
// engine's queue, with at most queue_depth pieces in flight over all of them. EINTR is retried
// and partial transfers continue. single_submit and overlap_events do not apply. The config must
// be valid (validate()). See AsyncIo for the contract; set_thread_io_fault_injector's hook is
// called here.
std::unique_ptr<AsyncIo> make_thread_pool_io(const AioConfig& config);

}  // namespace tessera::io
