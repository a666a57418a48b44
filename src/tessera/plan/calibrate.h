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
// tokens, other kernels at 2^16 .. 2^22 elements, collectives over `world` at 64 KiB .. 64 MiB
// (latency and bus bandwidth fitted by least squares; none with one rank) and the share of one that
// compute hides (Links::overlap), the cost of re-touching pages given back (4 and 64 MiB).
#pragma once

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

}  // namespace tessera::plan
