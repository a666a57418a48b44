// Memory-bound kernels: LayerNorm, RMSNorm, GELU, SwiGLU, embedding, dropout, a linear layer's
// bias.
//
// Reported: GB/s = bytes read + written per call / time. Per call (s = sizeof(T), N tokens):
//   layer_norm fwd   N C s (inp) + 2 C s (weight, bias) + N C s (out) + 8 N (mean, rstd)
//   layer_norm bwd   2 N C s (dout, inp) + C s + 8 N + N C s (dinp) + 16 C (dweight, dbias +=)
//   rms_norm fwd     N C s + C s + N C s + 4 N;  bwd: 3 N C s + C s + 4 N + 8 C
//   gelu fwd         2 N C s (n = N C elements);  bwd: 3 N C s
//   swiglu fwd       2 N F s (inp) + N F s (out);  bwd: N F s + 2 N F s + 2 N F s
//   embedding fwd    8 N (ids) + 2 N C s (wte, wpe rows) + N C s (out)
//   embedding bwd    8 N + N C s (dout) + 2 * 2 N C 4 (read-modify-write of the dwte, dwpe rows)
//   dropout fwd/bwd  2 N C s
//   bias fwd         2 N C s (out, in place) + C s (bias): a linear layer's bias pass after a
//                    product that wrote T (kernels/linear.h bias_forward)
// The per-chunk partials of the norm backward (ceil(N/64) C floats, cache resident) are not
// counted. At N = 1024, C = 768 the tensors are 1.5-3 MB: they live in L2/L3, so these are
// cache bandwidths; N = 8192 shows the DRAM-bound figures.
// Compared with: Peer/Copy, an OpenMP row-parallel memcpy of an fp32 (N, C) buffer (2 N C 4
// bytes per call): what a pure stream of the same size achieves on this machine.
//
// Arguments: N, C (F for SwiGLU), threads.
// Run: build/bin/pointwise_bench --benchmark_counters_tabular=true

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/philox.h"
#include "tessera/core/threads.h"
#include "tessera/kernels/activations.h"
#include "tessera/kernels/dropout.h"
#include "tessera/kernels/embedding.h"
#include "tessera/kernels/linear.h"
#include "tessera/kernels/norms.h"

namespace tessera::kernels {
namespace {

constexpr int64_t kVocab = 50304, kPositions = 1024;

template <typename Float>
std::vector<Float> filled(int64_t n, uint64_t seed) {
  const PhiloxKey key = philox_key(seed, RngPurpose::kTest, 0);
  std::vector<Float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = from_f32<Float>(philox_normal(key, 0, i));
  return v;
}

// The (V, C) embedding table is large (150 MB fp32); its values do not matter for speed, so it
// gets a cheap pattern instead of Philox normals.
template <typename Float>
std::vector<Float> pattern(int64_t n) {
  std::vector<Float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = from_f32<Float>(static_cast<float>(i % 1999) * 1e-3f);
  return v;
}

void set_gbps(benchmark::State& state, double bytes) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

struct Sizes {
  int64_t N, C;
  explicit Sizes(benchmark::State& state) : N(state.range(0)), C(state.range(1)) {
    set_num_threads(static_cast<int>(state.range(2)));
  }
};

template <typename T>
void BM_LayerNormForward(benchmark::State& state) {
  const Sizes z(state);
  const auto x = filled<T>(z.N * z.C, 1), w = filled<T>(z.C, 2), b = filled<T>(z.C, 3);
  std::vector<T> out(z.N * z.C);
  std::vector<float> mean(z.N), rstd(z.N);
  for (auto _ : state) {
    layer_norm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), z.N, z.C,
                       1e-5f);
    benchmark::DoNotOptimize(out.data());
  }
  const double s = sizeof(T);
  set_gbps(state, 2.0 * z.N * z.C * s + 2.0 * z.C * s + 8.0 * z.N);
}

template <typename T>
void BM_LayerNormBackward(benchmark::State& state) {
  const Sizes z(state);
  const auto x = filled<T>(z.N * z.C, 1), w = filled<T>(z.C, 2), b = filled<T>(z.C, 3);
  const auto dout = filled<T>(z.N * z.C, 4);
  std::vector<T> out(z.N * z.C), dinp(z.N * z.C);
  std::vector<float> mean(z.N), rstd(z.N), dw(z.C), db(z.C);
  layer_norm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), z.N, z.C,
                     1e-5f);
  for (auto _ : state) {
    layer_norm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                        mean.data(), rstd.data(), z.N, z.C);
    benchmark::DoNotOptimize(dinp.data());
  }
  const double s = sizeof(T);
  set_gbps(state, 3.0 * z.N * z.C * s + z.C * s + 8.0 * z.N + 16.0 * z.C);
}

template <typename T>
void BM_RmsNormForward(benchmark::State& state) {
  const Sizes z(state);
  const auto x = filled<T>(z.N * z.C, 1), w = filled<T>(z.C, 2);
  std::vector<T> out(z.N * z.C);
  std::vector<float> rstd(z.N);
  for (auto _ : state) {
    rms_norm_forward(out.data(), rstd.data(), x.data(), w.data(), z.N, z.C, 1e-5f);
    benchmark::DoNotOptimize(out.data());
  }
  const double s = sizeof(T);
  set_gbps(state, 2.0 * z.N * z.C * s + z.C * s + 4.0 * z.N);
}

template <typename T>
void BM_RmsNormBackward(benchmark::State& state) {
  const Sizes z(state);
  const auto x = filled<T>(z.N * z.C, 1), w = filled<T>(z.C, 2), dout = filled<T>(z.N * z.C, 4);
  std::vector<T> out(z.N * z.C), dinp(z.N * z.C);
  std::vector<float> rstd(z.N), dw(z.C);
  rms_norm_forward(out.data(), rstd.data(), x.data(), w.data(), z.N, z.C, 1e-5f);
  for (auto _ : state) {
    rms_norm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), z.N,
                      z.C);
    benchmark::DoNotOptimize(dinp.data());
  }
  const double s = sizeof(T);
  set_gbps(state, 3.0 * z.N * z.C * s + z.C * s + 4.0 * z.N + 8.0 * z.C);
}

template <typename T>
void BM_GeluForward(benchmark::State& state) {
  const Sizes z(state);
  const auto x = filled<T>(z.N * z.C, 1);
  std::vector<T> out(z.N * z.C);
  for (auto _ : state) {
    gelu_forward(out.data(), x.data(), z.N * z.C);
    benchmark::DoNotOptimize(out.data());
  }
  set_gbps(state, 2.0 * z.N * z.C * sizeof(T));
}

template <typename T>
void BM_BiasForward(benchmark::State& state) {
  const Sizes z(state);
  const auto bias = filled<T>(z.C, 2);
  auto out = filled<T>(z.N * z.C, 1);  // in place: each call adds the bias once more (no overflow
                                       // in a run's few thousand calls, so no NaN path either)
  for (auto _ : state) {
    bias_forward(out.data(), bias.data(), z.N, z.C);
    benchmark::DoNotOptimize(out.data());
  }
  set_gbps(state, 2.0 * z.N * z.C * sizeof(T) + z.C * sizeof(T));
}

template <typename T>
void BM_GeluBackward(benchmark::State& state) {
  const Sizes z(state);
  const auto x = filled<T>(z.N * z.C, 1), dout = filled<T>(z.N * z.C, 2);
  std::vector<T> dinp(z.N * z.C);
  for (auto _ : state) {
    gelu_backward(dinp.data(), dout.data(), x.data(), z.N * z.C);
    benchmark::DoNotOptimize(dinp.data());
  }
  set_gbps(state, 3.0 * z.N * z.C * sizeof(T));
}

// C plays F here: inp (N, 2F), out (N, F).
template <typename T>
void BM_SwiGluForward(benchmark::State& state) {
  const Sizes z(state);
  const auto inp = filled<T>(z.N * 2 * z.C, 1);
  std::vector<T> out(z.N * z.C);
  for (auto _ : state) {
    swiglu_forward(out.data(), inp.data(), z.N, z.C);
    benchmark::DoNotOptimize(out.data());
  }
  set_gbps(state, 3.0 * z.N * z.C * sizeof(T));
}

template <typename T>
void BM_SwiGluBackward(benchmark::State& state) {
  const Sizes z(state);
  const auto inp = filled<T>(z.N * 2 * z.C, 1), dout = filled<T>(z.N * z.C, 2);
  std::vector<T> dinp(z.N * 2 * z.C);
  for (auto _ : state) {
    swiglu_backward(dinp.data(), dout.data(), inp.data(), z.N, z.C);
    benchmark::DoNotOptimize(dinp.data());
  }
  set_gbps(state, 5.0 * z.N * z.C * sizeof(T));
}

std::vector<int32_t> token_ids(int64_t N) {
  const PhiloxKey key = philox_key(5, RngPurpose::kTest, 0);
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n) t[n] = static_cast<int32_t>(philox_block(key, 0, n)[0] % kVocab);
  return t;
}
std::vector<int32_t> position_ids(int64_t N) {
  std::vector<int32_t> p(N);
  for (int64_t n = 0; n < N; ++n) p[n] = static_cast<int32_t>(n % kPositions);
  return p;
}

template <typename T>
void BM_EmbeddingForward(benchmark::State& state) {
  const Sizes z(state);
  const auto wte = pattern<T>(kVocab * z.C), wpe = filled<T>(kPositions * z.C, 2);
  const auto tokens = token_ids(z.N), positions = position_ids(z.N);
  std::vector<T> out(z.N * z.C);
  for (auto _ : state) {
    embedding_forward(out.data(), tokens.data(), positions.data(), wte.data(), wpe.data(), z.N, z.C,
                      0, kVocab);
    benchmark::DoNotOptimize(out.data());
  }
  set_gbps(state, 8.0 * z.N + 3.0 * z.N * z.C * sizeof(T));
}

template <typename T>
void BM_EmbeddingBackward(benchmark::State& state) {
  const Sizes z(state);
  const auto dout = filled<T>(z.N * z.C, 1);
  const auto tokens = token_ids(z.N), positions = position_ids(z.N);
  std::vector<float> dwte(kVocab * z.C, 0.0f), dwpe(kPositions * z.C, 0.0f);
  for (auto _ : state) {
    embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), positions.data(), z.N,
                       z.C, 0, kVocab);
    benchmark::DoNotOptimize(dwte.data());
  }
  set_gbps(state, 8.0 * z.N + z.N * z.C * sizeof(T) + 16.0 * z.N * z.C);
}

template <typename T>
void BM_DropoutForward(benchmark::State& state) {
  const Sizes z(state);
  const auto x = filled<T>(z.N * z.C, 1);
  std::vector<T> out(z.N * z.C);
  const PhiloxKey key = philox_key(1, RngPurpose::kHiddenDropout, 0);
  const TokenCoords coords{
      .sample_offset = 0, .seq_offset = 0, .local_seq = 1024, .global_seq = 1024, .split = {}};
  for (auto _ : state) {
    dropout_forward(out.data(), x.data(), key, coords, z.N, z.C, 0.1f);
    benchmark::DoNotOptimize(out.data());
  }
  set_gbps(state, 2.0 * z.N * z.C * sizeof(T));
}

void BM_PeerCopy(benchmark::State& state) {
  const Sizes z(state);
  const auto x = filled<float>(z.N * z.C, 1);
  std::vector<float> out(z.N * z.C);
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < z.N; ++n)
      std::memcpy(out.data() + n * z.C, x.data() + n * z.C, z.C * sizeof(float));
    benchmark::DoNotOptimize(out.data());
  }
  set_gbps(state, 2.0 * z.N * z.C * sizeof(float));
}

void hidden_args(benchmark::internal::Benchmark* b) {
  for (int64_t n : {1024, 8192})
    for (int threads : {1, 2}) b->Args({n, 768, threads});
  b->ArgNames({"N", "C", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}
void ffn_args(benchmark::internal::Benchmark* b) {
  for (int64_t n : {1024, 8192})
    for (int threads : {1, 2}) b->Args({n, 2048, threads});
  b->ArgNames({"N", "F", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_PeerCopy)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_LayerNormForward, float)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_LayerNormForward, bf16)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_LayerNormBackward, float)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_LayerNormBackward, bf16)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_RmsNormForward, float)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_RmsNormForward, bf16)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_RmsNormBackward, float)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_RmsNormBackward, bf16)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_GeluForward, float)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_GeluForward, bf16)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_GeluBackward, float)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_GeluBackward, bf16)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_BiasForward, float)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_BiasForward, bf16)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_SwiGluForward, float)->Apply(ffn_args);
BENCHMARK_TEMPLATE(BM_SwiGluForward, bf16)->Apply(ffn_args);
BENCHMARK_TEMPLATE(BM_SwiGluBackward, float)->Apply(ffn_args);
BENCHMARK_TEMPLATE(BM_SwiGluBackward, bf16)->Apply(ffn_args);
BENCHMARK_TEMPLATE(BM_EmbeddingForward, float)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_EmbeddingForward, bf16)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_EmbeddingBackward, float)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_EmbeddingBackward, bf16)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_DropoutForward, float)->Apply(hidden_args);
BENCHMARK_TEMPLATE(BM_DropoutForward, bf16)->Apply(hidden_args);

}  // namespace
}  // namespace tessera::kernels

BENCHMARK_MAIN();
