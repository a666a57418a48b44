#include "tessera/train/straggler_report.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "tessera/distributed/sum_scalars.h"

namespace tessera::train {

StragglerReport::Result StragglerReport::report(const pipeline::Timeline& timeline,
                                                double collective_seconds) {
  using Phase = pipeline::Timeline::Phase;
  const double n = static_cast<double>(std::max<int64_t>(iterations_, 1));
  // This rank's milliseconds per iteration: [iteration, phase 0 .. kPhases - 1].
  std::vector<double> mine = {iteration_seconds_ * 1e3 / n};
  for (double seconds : window_.take(timeline)) mine.push_back(seconds * 1e3 / n);
  mine.push_back((collective_seconds - last_collective_) * 1e3 / n);
  last_collective_ = collective_seconds;
  iteration_seconds_ = 0;
  iterations_ = 0;
  const std::vector<std::vector<double>> all = distributed::gather_over(world_, mine);
  const int ranks = static_cast<int>(all.size());

  Result out;
  char buf[160];
  std::snprintf(buf, sizeof buf, " straggler (ms per iteration over %d ranks) |", ranks);
  out.line = buf;
  auto extremes = [&](const char* name, size_t i) {
    int lo = 0, hi = 0;
    for (int r = 1; r < ranks; ++r) {
      if (all[r][i] < all[lo][i]) lo = r;
      if (all[r][i] > all[hi][i]) hi = r;
    }
    std::snprintf(buf, sizeof buf, " %s min %.1f (rank %d) max %.1f (rank %d) |", name, all[lo][i],
                  lo, all[hi][i], hi);
    out.line += buf;
  };
  extremes("iteration", 0);
  for (int p = 0; p < kPhases; ++p)
    extremes(pipeline::Timeline::phase_name(static_cast<Phase>(p)), 1 + p);
  extremes("tp/ep collectives", 1 + kPhases);
  // Compute time per rank: forward + backward + optimizer, less the collectives inside them.
  auto compute = [&](int r) {
    return all[r][1 + static_cast<int>(Phase::kForward)] +
           all[r][1 + static_cast<int>(Phase::kBackward)] +
           all[r][1 + static_cast<int>(Phase::kOptimizer)] - all[r][1 + kPhases];
  };
  int slow = 0, fast = 0;
  for (int r = 1; r < ranks; ++r) {
    if (compute(r) > compute(slow)) slow = r;
    if (compute(r) < compute(fast)) fast = r;
  }
  const double excess = compute(fast) > 0 ? 100.0 * (compute(slow) / compute(fast) - 1.0) : 0.0;
  std::snprintf(buf, sizeof buf, " slowest: rank %d, compute %.1f ms, +%.0f%% over the fastest |",
                slow, compute(slow), excess);
  out.line += buf;
  out.slowest_rank = slow;
  return out;
}

}  // namespace tessera::train
