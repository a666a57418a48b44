// Memory-bound kernels at the end of a step: fused cross-entropy over the LM-head logits and
// the AdamW update over all parameters. Both are reported in GB/s of compulsory DRAM traffic
// and compared with a plain memcpy of the same footprint (the practical bandwidth ceiling).
#include <benchmark/benchmark.h>

#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/kernels/adamw.h"
#include "tessera/kernels/cross_entropy.h"

namespace {

using tessera::bf16;

constexpr int64_t kTokens = 1024;  // N = B*T, e.g. 1 x 1024
constexpr int64_t kVocab = 50304;  // GPT-2 vocabulary padded to a multiple of 128
constexpr int64_t kVocabReal = 50257;
constexpr int64_t kParams = 124'000'000;  // GPT-2 small

// Non-constant contents, so no page holds identical data (a hypervisor could otherwise merge
// pages and flatter the bandwidth).
std::vector<float> varied(int64_t n, float scale) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = scale * (1.0f + static_cast<float>(i % 4099) * 1e-4f);
  return x;
}

template <typename T>
void BM_CrossEntropy(benchmark::State& state) {
  std::vector<T> logits(kTokens * kVocab);
  for (int64_t i = 0; i < kTokens * kVocab; ++i) {
    logits[i] = tessera::from_f32<T>(static_cast<float>((i * 2654435761u) % 1000) * 0.01f - 5.0f);
  }
  std::vector<int32_t> targets(kTokens);
  for (int64_t n = 0; n < kTokens; ++n) targets[n] = static_cast<int32_t>((n * 7919) % kVocabReal);
  std::vector<float> losses(kTokens);
  for (auto _ : state) {
    // dlogits aliases logits, as in training; the gradient is valid input for the next call.
    tessera::kernels::cross_entropy_forward_backward<T>(losses.data(), logits.data(), logits.data(),
                                                        targets.data(), nullptr, kTokens, kVocab,
                                                        kVocabReal, 1.0f);
    benchmark::DoNotOptimize(losses.data());
  }
  // Compulsory traffic: read the logits once, write the gradient once.
  const double bytes = 2.0 * kTokens * kVocab * sizeof(T);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["rows/s"] =
      benchmark::Counter(kTokens * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CrossEntropy<float>)
    ->Name("CrossEntropy/fp32/N1024_V50304")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_CrossEntropy<bf16>)
    ->Name("CrossEntropy/bf16/N1024_V50304")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

template <typename T>
void BM_AdamW(benchmark::State& state) {
  std::vector<float> master = varied(kParams, 0.5f), m(kParams, 0.0f), v(kParams, 0.0f),
                     grad = varied(kParams, 1e-3f);
  std::vector<T> out(kParams);
  int64_t step = 0;
  for (auto _ : state) {
    tessera::kernels::adamw_step<T>(master.data(), m.data(), v.data(), out.data(), grad.data(),
                                    kParams, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step, 1.0f);
    benchmark::ClobberMemory();
  }
  // Read master, m, v, grad; write master, m, v and the compute-dtype copy.
  const double bytes = double(kParams) * (4 * 4 + 3 * 4 + sizeof(T));
  state.counters["GB/s"] =
      benchmark::Counter(bytes * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AdamW<float>)
    ->Name("AdamW/fp32_out/124M")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_AdamW<bf16>)
    ->Name("AdamW/bf16_out/124M")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_SumSquares(benchmark::State& state) {
  const std::vector<float> grad = varied(kParams, 1e-3f);
  for (auto _ : state)
    benchmark::DoNotOptimize(tessera::kernels::sum_squares(grad.data(), kParams));
  state.counters["GB/s"] =
      benchmark::Counter(4.0 * kParams * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SumSquares)->Name("SumSquares/124M")->Unit(benchmark::kMillisecond)->UseRealTime();

// Reference ceiling: an OpenMP copy of 4 bytes x 124M over the same thread team (read + write
// counted, like the kernels above).
void BM_CopyReference(benchmark::State& state) {
  std::vector<float> a = varied(kParams, 1.0f), b(kParams);
  for (auto _ : state) {
    float* dst = b.data();
    const float* src = a.data();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < kParams; ++i) dst[i] = src[i];
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(2.0 * 4 * kParams * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CopyReference)
    ->Name("Reference/copy/496MB")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
