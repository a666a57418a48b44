// The wall time spent inside gemm (gemm.h::gemm_seconds): each public gemm entry point holds a
// GemmClock for its call; only the outermost clock of a thread counts (the widened path calls the
// fp32 gemm inside a 16-bit one). Two steady_clock reads per call, against products of
// microseconds or more.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tessera::kernels::detail {

// Nanoseconds in gemm calls so far, summed over calling threads.
inline std::atomic<int64_t> g_gemm_nanoseconds{0};

class GemmClock {
 public:
  GemmClock() : start_(std::chrono::steady_clock::now()) { ++depth(); }
  ~GemmClock() {
    if (--depth() > 0) return;
    const auto elapsed = std::chrono::steady_clock::now() - start_;
    g_gemm_nanoseconds.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count(),
        std::memory_order_relaxed);
  }
  GemmClock(const GemmClock&) = delete;
  GemmClock& operator=(const GemmClock&) = delete;

 private:
  static int& depth() {
    thread_local int open_clocks = 0;
    return open_clocks;
  }
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tessera::kernels::detail
