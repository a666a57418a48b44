// measure_peak_gflops (gemm.h): the reference rate benchmarks print next to their figures.
#include <time.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/kernels/gemm.h"

namespace tessera::kernels {

double measure_peak_gflops(DType dtype, int64_t n, int repeats) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw Error(std::string("measure_peak_gflops: dtype ") + dtype_name(dtype) +
                " has no GEMM; expected fp32 or bf16");
  if (n <= 0 || repeats <= 0)
    throw Error("measure_peak_gflops: n and repeats must be positive, got n=" + std::to_string(n) +
                " repeats=" + std::to_string(repeats));
  const size_t count = static_cast<size_t>(n * n);
  std::vector<float> a(count), b(count), c(count);
  for (size_t i = 0; i < count; ++i) {
    // Small non-trivial values; denormals or zeros could take other paths in the hardware.
    a[i] = 0.001f * static_cast<float>(i % 97) - 0.05f;
    b[i] = 0.002f * static_cast<float>(i % 89) - 0.09f;
  }
  std::vector<bf16> a16, b16, c16;
  if (dtype == DType::kBF16) {
    a16.resize(count), b16.resize(count), c16.resize(count);
    convert(a16.data(), a.data(), static_cast<int64_t>(count));
    convert(b16.data(), b.data(), static_cast<int64_t>(count));
  }
  const auto run = [&] {
    if (dtype == DType::kF32)
      gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    else
      gemm(false, false, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c16.data(), n);
  };
  run();  // warm-up: primitive creation, page faults, thread start
  // CPU time of the calling thread, like Google Benchmark's default: on a machine shared with
  // other work it counts only the time this thread ran (OpenMP workers run in lockstep with it).
  const auto thread_seconds = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = thread_seconds();
    run();
    const double s = thread_seconds() - t0;
    best = std::max(best, 2.0 * static_cast<double>(n) * n * n / s * 1e-9);
  }
  return best;
}

}  // namespace tessera::kernels
