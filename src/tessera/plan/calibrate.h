// Calibration: this machine's rates for the step-time model (plan/machine.h), measured through
// the kernels' and collectives' own code paths (kernels::gemm, attention, norms, ...;
// comm::ProcessGroup), as tessera-train runs them.
//
// Every rank of `world` (the ranks sharing this host) runs each benchmark at the same moment
// (a barrier before each), so the rates are one rank's while the others are busy too: what a
// layout of that many ranks a host sees. A rate is the median of five rounds, each timing
// repeated calls for at least ~40 ms of wall-clock time; rank 0's figures are the result.
// Sizes: a transformer layer's four products over 1024 rows at hidden widths 64 .. 1024 (each of
// a linear layer's forward, input gradient and weight gradient), causal attention at 128 .. 1024
// tokens, other kernels at 2^16 .. 2^22 elements (the products', norms', activations', adds' and
// dropout's operands rotated over 64 MiB of copies: a step finds them outside the core's own
// caches), collectives over `world` at 64 KiB .. 64 MiB
// (latency and bus bandwidth fitted by least squares; none with one rank) and the share of one that
// compute hides (Links::overlap), the cost of re-touching pages given back (4 and 64 MiB).
#pragma once

#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/core/dtype.h"
#include "tessera/plan/machine.h"

namespace tessera::plan {

// Collective over `world`. Kernels run on `threads` threads a rank; `dtypes` are the compute
// dtypes measured (fp32 rates are always measured: gradients and their norm are fp32).
// `quick`: only the smallest sizes (seconds instead of tens of them; for tests of the path).
HostConfiguration calibrate_host(comm::ProcessGroup& world, int threads,
                                 const std::vector<DType>& dtypes, bool quick = false);

// Throws tessera::Error naming `dir` unless it is a directory whose file system takes direct I/O
// (O_DIRECT), as NVMe offload needs: checked by a probe file, removed again. Cheap; the tool calls
// it before minutes of other measuring, calibrate_storage again before its own.
void require_storage_dir(const std::string& dir);

// The direct-I/O write and read rates of directory `dir` (NVMe offload's swap directory) for one
// rank while every rank of `world` streams a file of its own there at once: 1 GiB written, then
// read back, in 64 MiB requests four in flight through offload::SwapIo (DeepSpeed's default aio
// settings), the median of three rounds (`quick`: 16 MiB in 1 MiB requests, once). The files are
// removed. tessera::Error naming `dir` when it is not a directory or refuses O_DIRECT.
StorageRates calibrate_storage(comm::ProcessGroup& world, const std::string& dir,
                               bool quick = false);

}  // namespace tessera::plan
