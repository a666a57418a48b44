// Summing a few fp64 scalars (loss sums, token counts, squared norms) over a group so that every
// member gets the bitwise-same total, independent of the reduction algorithm MPI picks; and
// gathering them (per-rank timings).
#pragma once

#include <vector>

#include "tessera/comm/process_group.h"

namespace tessera::distributed {

// Returns, on every member of `group`, the sum over members of `values` (element-wise), added in
// rank order in fp64. Each value travels as two fp32 words (hi + lo, ~48 significant bits), so
// the sum is not rounded to fp32. `group` may be nullptr (returns `values`). Collective.
std::vector<double> sum_over(comm::ProcessGroup* group, const std::vector<double>& values);

// Every member's `values` (the same count on each), indexed [member rank][i], on every member,
// with the same ~48-bit precision. `group` may be nullptr (returns {values}). Collective.
std::vector<std::vector<double>> gather_over(comm::ProcessGroup* group,
                                             const std::vector<double>& values);

}  // namespace tessera::distributed
