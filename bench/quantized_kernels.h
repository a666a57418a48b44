// The quantized matrix-vector kernel alone (build/bin/quantized --kernels memory|cache): for each
// format, kernels::quantized_gemv and quantized_gemv_bf16 on one input row against the read rate
// measured in the same run, beside the bf16 matrix-vector kernel on the same shapes — what the
// model-level figures (decode tokens/s) are made of, without the rest of a decode step. `memory`: 8
// matrices of LLaMA-1B's MLP shape (5632 x 2048, ~92 M weights, far beyond the caches), so the
// codes come from memory. `cache`: one 256 x 2048 matrix 200 times, so they come from the caches
// and the figure is the kernel's decoding rate (run it at --threads 1 for one core's).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/kernels/gemv.h"
#include "tessera/quant/quantized_linear.h"
#include "tessera/quant/quantized_matrix.h"

namespace tessera::bench {

inline void quantized_kernel_speeds(const std::vector<quant::QuantFormat>& formats,
                                    double read_gb_s, bool from_cache) {
  // `distinct` matrices, each multiplied `repeats` times a pass.
  const int64_t rows = from_cache ? 256 : 5632, cols = 2048, distinct = from_cache ? 1 : 8,
                repeats = from_cache ? 200 : 1, products = distinct * repeats;
  constexpr int kPasses = 5;
  const char* from = from_cache ? "cache" : "memory";
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> weights(rows * cols), x(cols), out(rows);
  for (float& w : weights) w = normal(rng);
  for (float& v : x) v = normal(rng);
  using Clock = std::chrono::steady_clock;
  // Best of kPasses over all matrices, in GB/s of `bytes` a pass.
  auto best_rate = [&](double bytes, auto&& one_pass) {
    double best = 1e30;
    for (int p = 0; p < kPasses + 1; ++p) {
      const auto t0 = Clock::now();
      one_pass();
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (p > 0) best = std::min(best, s);  // the first pass warms up
    }
    return bytes / best / 1e9;
  };
  {
    std::vector<bf16> w16(weights.size()), x16(cols), o16(rows);
    for (size_t i = 0; i < weights.size(); ++i) w16[i] = bf16(weights[i]);
    for (int64_t i = 0; i < cols; ++i) x16[i] = bf16(x[i]);
    std::vector<std::vector<bf16>> mats(distinct, w16);
    const double rate = best_rate(2.0 * products * rows * cols, [&] {
      for (int64_t r = 0; r < repeats; ++r)
        for (const auto& m : mats)
          kernels::gemv_forward(o16.data(), x16.data(), m.data(), static_cast<const bf16*>(nullptr),
                                1, cols, rows);
    });
    std::printf(
        "kernel bf16 gemv (%lld x %lld, one row, from %s): %.1f GB/s, %.0f%% of the read "
        "rate\n",
        static_cast<long long>(rows), static_cast<long long>(cols), from, rate,
        100 * rate / read_gb_s);
  }
  std::vector<bf16> x16(cols);
  for (int64_t i = 0; i < cols; ++i) x16[i] = bf16(x[i]);
  for (quant::QuantFormat f : formats) {
    const quant::QuantizedMatrix q = quant::quantize(weights.data(), rows, cols, f);
    std::vector<quant::QuantizedMatrix> mats(distinct, q);
    // fp32 inputs (an fp32 model's), then bf16 ones (a bf16 model's: kernels/quantized_gemv.h).
    for (const bool bf16_inputs : {false, true}) {
      const double rate = best_rate(static_cast<double>(products) * q.bytes(), [&] {
        for (int64_t r = 0; r < repeats; ++r)
          for (const auto& m : mats) {
            if (bf16_inputs)
              kernels::quantized_gemv_bf16(out.data(), x16.data(), quant::weights_view(m), 1);
            else
              kernels::quantized_gemv(out.data(), x.data(), quant::weights_view(m), 1);
          }
      });
      std::printf(
          "kernel %s gemv, %s inputs (%lld x %lld, one row, from %s): %.1f GB/s, %.0f%% of the "
          "read rate, %.2f G weights/s (bf16 at the read rate: %.2f)\n",
          quant::quant_format_name(f), bf16_inputs ? "bf16" : "fp32", static_cast<long long>(rows),
          static_cast<long long>(cols), from, rate, 100 * rate / read_gb_s,
          rate * rows * cols / q.bytes(), read_gb_s / 2);
    }
  }
}

}  // namespace tessera::bench
