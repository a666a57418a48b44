// Causal attention and RoPE throughput.
//
// FLOPs counted for causal attention (the masked half is not counted): each T x T x HD product
// is 2 * (T^2 / 2) * HD = T^2 HD per (sample, head). Forward has two (Q K^T, P V): 2 B NH T^2 HD.
// Backward has five (Q K^T recomputed, dO V^T, P^T dO, dS K, dS^T Q): 5 B NH T^2 HD.
// Compared with: Peer/GemmQKt, the same Q K^T products (full, not causal) through
// tessera::kernels::gemm (OpenBLAS sgemm), i.e. what a materialising implementation's best
// GEMM does at this shape on this machine.
//
// With documents (t1024_docs128) only visible pairs are counted, so GFLOP/s compares the work
// done, and the time shows what skipping invisible key blocks saves.
//
// Arguments: threads. Run: build/bin/attention_bench --benchmark_counters_tabular=true

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/philox.h"
#include "tessera/core/threads.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/gemm.h"
#include "tessera/kernels/rope.h"

namespace tessera::kernels {
namespace {

struct Config {
  int64_t B, T;
  int NH, KV, HD;
  float dropout;
  int64_t doc_length = 0;  // > 0: document masking (doc_start) with documents of this length
};

// gpt2-124m training step: micro-batch 4, sequence 256, 12 heads of 64.
constexpr Config kGpt2{4, 256, 12, 12, 64, 0.0f};
constexpr Config kGpt2Dropout{4, 256, 12, 12, 64, 0.1f};
// Longer sequence, same heads.
constexpr Config kGpt2Long{1, 1024, 12, 12, 64, 0.0f};
// T = 1024 packed with documents of 128 tokens (--reset-attention-mask): only the diagonal key
// blocks are visible, so the kernel skips the rest.
constexpr Config kGpt2LongDocs{1, 1024, 12, 12, 64, 0.0f, 128};
// LLaMA-style GQA with HD = 128 (8 query heads in 2 groups).
constexpr Config kGqa128{1, 512, 8, 2, 128, 0.0f};

template <typename Float>
std::vector<Float> filled(int64_t n, uint64_t seed) {
  const PhiloxKey key = philox_key(seed, RngPurpose::kTest, 0);
  std::vector<Float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = from_f32<Float>(philox_normal(key, 0, i));
  return v;
}

AttentionDropout dropout_of(const Config& c) {
  AttentionDropout d;
  d.p = c.dropout;
  d.key = philox_key(7, RngPurpose::kAttentionDropout, 0);
  return d;
}

// doc_start (B, T) for c.doc_length > 0, else empty (causal).
std::vector<int32_t> doc_starts(const Config& c) {
  std::vector<int32_t> ds;
  if (c.doc_length > 0)
    for (int64_t i = 0; i < c.B * c.T; ++i)
      ds.push_back(static_cast<int32_t>((i % c.T) / c.doc_length * c.doc_length));
  return ds;
}

// FLOPs of one T x T x HD product over the visible (query, key) pairs: T^2 HD per (sample,
// head) for causal attention (the convention above), 2 HD per visible pair with documents.
double causal_product_flops(const Config& c) {
  if (c.doc_length > 0) {
    double pairs = 0;
    for (int64_t t = 0; t < c.T; ++t) pairs += double(t % c.doc_length + 1);
    return double(c.B) * c.NH * 2.0 * pairs * c.HD;
  }
  return double(c.B) * c.NH * double(c.T) * double(c.T) * c.HD;
}

template <typename Float>
void BM_AttentionForward(benchmark::State& state, Config c) {
  set_num_threads(static_cast<int>(state.range(0)));
  const int64_t width = (int64_t{c.NH} + 2 * c.KV) * c.HD;
  const std::vector<Float> qkv = filled<Float>(c.B * c.T * width, 1);
  std::vector<Float> out(c.B * c.T * c.NH * c.HD);
  std::vector<float> lse(c.B * c.NH * c.T);
  const AttentionDropout d = dropout_of(c);
  const std::vector<int32_t> ds = doc_starts(c);
  const int32_t* doc = ds.empty() ? nullptr : ds.data();
  for (auto _ : state) {
    attention_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.NH, c.KV, c.HD, d, doc);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2 * causal_product_flops(c) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

template <typename Float>
void BM_AttentionBackward(benchmark::State& state, Config c) {
  set_num_threads(static_cast<int>(state.range(0)));
  const int64_t width = (int64_t{c.NH} + 2 * c.KV) * c.HD;
  const std::vector<Float> qkv = filled<Float>(c.B * c.T * width, 1);
  const std::vector<Float> dout = filled<Float>(c.B * c.T * c.NH * c.HD, 2);
  std::vector<Float> out(dout.size()), dqkv(qkv.size());
  std::vector<float> lse(c.B * c.NH * c.T);
  const AttentionDropout d = dropout_of(c);
  const std::vector<int32_t> ds = doc_starts(c);
  const int32_t* doc = ds.empty() ? nullptr : ds.data();
  attention_forward(out.data(), lse.data(), qkv.data(), c.B, c.T, c.NH, c.KV, c.HD, d, doc);
  for (auto _ : state) {
    attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), c.B, c.T, c.NH,
                       c.KV, c.HD, d, doc);
    benchmark::DoNotOptimize(dqkv.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(5 * causal_product_flops(c) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// Peer: the B * NH score products S = Q K^T (T x T x HD, full) as fp32 GEMMs.
void BM_PeerGemmQKt(benchmark::State& state, Config c) {
  set_num_threads(static_cast<int>(state.range(0)));
  const std::vector<float> q = filled<float>(c.T * c.HD, 1), k = filled<float>(c.T * c.HD, 2);
  std::vector<float> s(c.T * c.T);
  for (auto _ : state) {
    for (int64_t bh = 0; bh < c.B * c.NH; ++bh)
      gemm(false, true, c.T, c.T, c.HD, 1.0f, q.data(), c.HD, k.data(), c.HD, 0.0f, s.data(), c.T);
    benchmark::DoNotOptimize(s.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2 * causal_product_flops(c) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

template <typename Float>
void BM_RopeForward(benchmark::State& state, Config c) {
  set_num_threads(static_cast<int>(state.range(0)));
  const int64_t width = (int64_t{c.NH} + 2 * c.KV) * c.HD;
  std::vector<Float> qkv = filled<Float>(c.B * c.T * width, 1);
  std::vector<int32_t> pos(c.T);
  for (int64_t t = 0; t < c.T; ++t) pos[t] = static_cast<int32_t>(t);
  for (auto _ : state) {
    rope_forward(qkv.data(), pos.data(), c.B, c.T, c.NH, c.KV, c.HD, 10000.0f);
    benchmark::DoNotOptimize(qkv.data());
  }
  // Bytes moved: the query and key heads are read and written once.
  const double bytes = 2.0 * c.B * c.T * (c.NH + c.KV) * c.HD * sizeof(Float);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void thread_args(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
}

// BENCHMARK_CAPTURE cannot take a template-id: one named function per storage type.
void BM_ForwardFp32(benchmark::State& s, Config c) { BM_AttentionForward<float>(s, c); }
void BM_BackwardFp32(benchmark::State& s, Config c) { BM_AttentionBackward<float>(s, c); }
void BM_ForwardBf16(benchmark::State& s, Config c) { BM_AttentionForward<bf16>(s, c); }
void BM_BackwardBf16(benchmark::State& s, Config c) { BM_AttentionBackward<bf16>(s, c); }
void BM_RopeFp32(benchmark::State& s, Config c) { BM_RopeForward<float>(s, c); }
void BM_RopeBf16(benchmark::State& s, Config c) { BM_RopeForward<bf16>(s, c); }

BENCHMARK_CAPTURE(BM_ForwardFp32, gpt2, kGpt2)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_BackwardFp32, gpt2, kGpt2)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_ForwardBf16, gpt2, kGpt2)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_BackwardBf16, gpt2, kGpt2)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_ForwardFp32, gpt2_dropout, kGpt2Dropout)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_BackwardFp32, gpt2_dropout, kGpt2Dropout)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_ForwardFp32, t1024, kGpt2Long)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_BackwardFp32, t1024, kGpt2Long)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_ForwardFp32, t1024_docs128, kGpt2LongDocs)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_BackwardFp32, t1024_docs128, kGpt2LongDocs)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_ForwardFp32, gqa_hd128, kGqa128)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_BackwardFp32, gqa_hd128, kGqa128)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_PeerGemmQKt, gpt2, kGpt2)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_RopeFp32, gpt2, kGpt2)->Apply(thread_args);
BENCHMARK_CAPTURE(BM_RopeBf16, gpt2, kGpt2)->Apply(thread_args);

}  // namespace
}  // namespace tessera::kernels

BENCHMARK_MAIN();
