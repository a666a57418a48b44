// Wall-clock intervals for logs, progress lines and benchmarks: the monotonic clock and the
// seconds elapsed since a point of it.
#pragma once

#include <chrono>

namespace tessera {

using Clock = std::chrono::steady_clock;

// Seconds from `start` to now (monotonic; fractional).
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace tessera
