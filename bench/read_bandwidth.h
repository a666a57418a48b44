// The machine's memory read rate, the reference decode benchmarks hold their figures against
// (bench/inference_main.cc, bench/quantized_main.cc): a 1 GiB float array read by the OpenMP
// team, the best of 5 passes of three readers — a plain loop of 64 independent sums (compiled
// for the baseline x86-64 here, so on wide-vector CPUs its adds, not memory, can bound it:
// measured 27.6 GB/s on an AVX-512 EPYC where a vector reader reached more), and two kernels
// that run on the CPU's best vector target: kernels::sum_squares (independent fp64 chains) and
// kernels::has_non_finite (one compare a vector, the lightest read the library has). Which is
// fastest depends on the CPU: on an AVX-512 Xeon (2026-12-02) the plain loop read 25-27 GB/s,
// sum_squares 26 and has_non_finite 29 (a hand-written 512-bit loop of four sums 30). The
// fastest is the machine's read rate as far as this process can see it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "tessera/core/threads.h"
#include "tessera/kernels/adamw.h"
#include "tessera/kernels/build_info.h"

namespace tessera::bench {

inline double read_bandwidth_gbs() {
  constexpr int kLanes = 64;
  const int64_t n = int64_t{1} << 28;
  std::vector<float> a(n, 1.0f);
  double best = 0, sink = 0;
  // One pass of a reader, timed: the rate counts toward the best.
  auto timed = [&](auto&& read) {
    const auto t0 = std::chrono::steady_clock::now();
    sink += read();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, n * 4.0 / s / 1e9);
  };
  for (int r = 0; r < 5; ++r) {
    timed([&] {
      double sum = 0;
#pragma omp parallel reduction(+ : sum)
      {
        float acc[kLanes] = {};
#pragma omp for schedule(static)
        for (int64_t i = 0; i < n; i += kLanes)
          for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j];
        for (float x : acc) sum += x;
      }
      return sum;
    });
    timed([&] { return kernels::sum_squares(a.data(), n); });
    timed([&] { return kernels::has_non_finite(a.data(), n) ? 1.0 : 0.0; });
  }
  if (sink < 0) std::printf("%g\n", sink);  // keeps the sums
  return best;
}

// Sets the thread count, prints the build's kernel line and the read rate, and returns the rate.
inline double announce_read_bandwidth(int threads) {
  set_num_threads(threads);
  std::printf("%s\n", kernels::version_line().c_str());
  const double bandwidth = read_bandwidth_gbs();
  std::printf(
      "read bandwidth (1 GiB array, %d threads, best of 5 passes of three readers): %.1f GB/s\n",
      threads, bandwidth);
  return bandwidth;
}

}  // namespace tessera::bench
