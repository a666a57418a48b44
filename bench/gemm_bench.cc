// GEMM backends on the GEMMs of a GPT-2 124M step (micro-batch 4, seq 256 -> N = 1024 tokens,
// C = 768, V = 50304), forward, dgrad and wgrad as linear.cc issues them, at 1 and 2 threads:
//   openblas/fp32   cblas_sgemm called directly (the candidate fp32 backend; only when the build
//                   found OpenBLAS, which is optional: TESSERA_BENCH_OPENBLAS)
//   onednn/fp32     tessera::kernels::gemm, fp32 (production path: oneDNN matmul)
//   tessera/bf16    tessera::kernels::gemm, bf16 (production path, the one gemm.h chooses: oneDNN
//                   bf16 with bf16 dot products, else the blocked GEMM; the label names it);
//                   forward and dgrad write bf16, wgrad accumulates (beta = 1) into fp32
//   blocked/fp32, blocked/bf16   Tessera's blocked GEMM (gemm_packed.h) called directly
//   widened/bf16    bf16 operands widened to fp32 copies for oneDNN's fp32 matmul (gemm_widened.h)
//   onednn-packed/* oneDNN matmul with the weight B reordered once into the layout the primitive
//                   prefers (format_tag::any); only the matmul is timed
//   reorder/bf16    that reorder alone (GB/s of bf16 weight), which training repeats after every
//                   optimizer step
//   onednn-reorder+packed/*  reorder and matmul on every call (packing inside gemm, no cache)
// plus a square peak shape. The context lines give measure_peak_gflops() at the default thread
// count. Rates use CPU time of the main thread (Google Benchmark's default), which is robust to
// other processes sharing the cores. Decision and table: docs/performance.md.
//
//   build/bin/gemm_bench --benchmark_min_time=0.2 --benchmark_repetitions=3
#include <benchmark/benchmark.h>
#ifdef TESSERA_BENCH_OPENBLAS
#include <cblas.h>
#endif

#include <cstdint>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/threads.h"
#include "tessera/kernels/gemm.h"
#include "tessera/kernels/gemm_packed.h"
#include "tessera/kernels/gemm_widened.h"

namespace {

using tessera::bf16;
using dt = dnnl::memory::data_type;

constexpr int64_t kN = 1024, kC = 768, kV = 50304;

// A gemm as gemm() sees it. `weight_is_b`: B is a parameter (forward and dgrad), so packing it
// is an option; wgrad multiplies two activations and accumulates (beta = 1) into fp32.
struct Shape {
  std::string name;
  bool trans_a, trans_b;
  int64_t M, N, K;
  float beta;
  bool weight_is_b;
};

std::vector<Shape> shapes() {
  std::vector<Shape> s;
  // Linear layers out(N,OC) = inp(N,C) @ W(OC,C)^T, as linear.cc calls gemm.
  const struct {
    const char* name;
    int64_t in, out;
  } layers[] = {{"qkv", kC, 3 * kC},
                {"attproj", kC, kC},
                {"fc", kC, 4 * kC},
                {"fcproj", 4 * kC, kC},
                {"lmhead", kC, kV}};
  for (const auto& l : layers) {
    s.push_back({std::string("fwd_") + l.name, false, true, kN, l.out, l.in, 0.0f, true});
    s.push_back({std::string("dgrad_") + l.name, false, false, kN, l.in, l.out, 0.0f, true});
    s.push_back({std::string("wgrad_") + l.name, true, false, l.out, l.in, kN, 1.0f, false});
  }
  s.push_back({"peak_2048", false, false, 2048, 2048, 2048, 0.0f, true});
  return s;
}

void fill(std::vector<float>& v, uint32_t seed) {
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) - 0.5f;
  }
}

struct Buffers {
  std::vector<float> a, b, c;
  std::vector<bf16> a16, b16, c16;
  Buffers(const Shape& s, bool need_bf16) : a(s.M * s.K), b(s.K * s.N), c(s.M * s.N) {
    fill(a, 1), fill(b, 2), fill(c, 3);
    if (need_bf16) {
      a16.resize(a.size()), b16.resize(b.size()), c16.resize(c.size());
      tessera::convert(a16.data(), a.data(), static_cast<int64_t>(a.size()));
      tessera::convert(b16.data(), b.data(), static_cast<int64_t>(b.size()));
    }
  }
};

dnnl::memory::desc strided(int64_t rows, int64_t cols, bool trans, dt type) {
  return dnnl::memory::desc({rows, cols}, type,
                            trans ? dnnl::memory::dims{1, rows} : dnnl::memory::dims{cols, 1});
}

// A oneDNN matmul bound to one problem's buffers; `packed` lets the primitive choose B's layout
// and holds B reordered into it.
struct OnednnRun {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul prim;
  dnnl::reorder pack;
  dnnl::memory::desc b_plain_md;
  dnnl::memory a_mem, b_plain, b_used, c_mem;
  std::string impl;

  OnednnRun(const Shape& s, dt in, dt out, void* a, void* b, void* c, bool packed) {
    const auto a_md = strided(s.M, s.K, s.trans_a, in);
    b_plain_md = strided(s.K, s.N, s.trans_b, in);
    const auto c_md = strided(s.M, s.N, false, out);
    const auto b_md =
        packed ? dnnl::memory::desc({s.K, s.N}, in, dnnl::memory::format_tag::any) : b_plain_md;
    dnnl::primitive_attr attr;
    if (s.beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(s.beta);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
    impl = pd.impl_info_str();
    prim = dnnl::matmul(pd);
    a_mem = dnnl::memory(a_md, engine, a);
    b_plain = dnnl::memory(b_plain_md, engine, b);
    c_mem = dnnl::memory(c_md, engine, c);
    if (packed && pd.weights_desc() != b_plain_md) {
      b_used = dnnl::memory(pd.weights_desc(), engine);
      pack = dnnl::reorder(b_plain, b_used);
      reorder();
    } else {
      b_used = b_plain;
    }
  }
  void reorder() {
    if (!pack) return;  // the primitive wanted the plain layout: nothing to pack
    pack.execute(stream, b_plain, b_used);
    stream.wait();
  }
  void run() {
    prim.execute(stream,
                 {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_used}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
  }
};

enum class Backend {
  kOpenblas,
  kOnednnF32,
  kTesseraBf16,
  kBlockedF32,
  kBlockedBf16,
  kWidenedBf16,
  kPackedF32,
  kPackedBf16,
  kReorderBf16,
  kReorderPackedBf16,
  kReorderPackedF32
};

bool is_packed(Backend b) {
  return b == Backend::kPackedF32 || b == Backend::kPackedBf16 || b == Backend::kReorderBf16 ||
         b == Backend::kReorderPackedBf16 || b == Backend::kReorderPackedF32;
}

void run_bench(benchmark::State& state, const Shape& s, Backend backend, int threads) {
  tessera::set_num_threads(threads);
  const bool bf = backend != Backend::kOpenblas && backend != Backend::kOnednnF32 &&
                  backend != Backend::kBlockedF32 && backend != Backend::kPackedF32 &&
                  backend != Backend::kReorderPackedF32;
  Buffers buf(s, bf);
  // wgrad accumulates into fp32; forward and dgrad write bf16 activations in the bf16 path.
  const bool bf16_out = bf && s.beta == 0.0f;
  std::unique_ptr<OnednnRun> dnn;
  if (!bf && is_packed(backend))
    dnn = std::make_unique<OnednnRun>(s, dt::f32, dt::f32, buf.a.data(), buf.b.data(), buf.c.data(),
                                      is_packed(backend));
  if (bf && is_packed(backend))
    dnn = std::make_unique<OnednnRun>(
        s, dt::bf16, bf16_out ? dt::bf16 : dt::f32, buf.a16.data(), buf.b16.data(),
        bf16_out ? static_cast<void*>(buf.c16.data()) : static_cast<void*>(buf.c.data()), true);
  const int64_t lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
  const auto once = [&] {
    switch (backend) {
      case Backend::kOpenblas:
#ifdef TESSERA_BENCH_OPENBLAS
        cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                    s.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(s.M),
                    static_cast<int>(s.N), static_cast<int>(s.K), 1.0f, buf.a.data(),
                    static_cast<int>(lda), buf.b.data(), static_cast<int>(ldb), s.beta,
                    buf.c.data(), static_cast<int>(s.N));
#endif
        break;
      case Backend::kOnednnF32:
        tessera::kernels::gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, buf.a.data(), lda,
                               buf.b.data(), ldb, s.beta, buf.c.data(), s.N);
        break;
      case Backend::kTesseraBf16:
        if (bf16_out)
          tessera::kernels::gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, buf.a16.data(), lda,
                                 buf.b16.data(), ldb, 0.0f, buf.c16.data(), s.N);
        else
          tessera::kernels::gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, buf.a16.data(), lda,
                                 buf.b16.data(), ldb, s.beta, buf.c.data(), s.N);
        break;
      case Backend::kBlockedF32:
        tessera::kernels::packed_gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, buf.a.data(), lda,
                                      buf.b.data(), ldb, s.beta, buf.c.data(), s.N);
        break;
      case Backend::kBlockedBf16:
        if (bf16_out)
          tessera::kernels::packed_gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, buf.a16.data(),
                                        lda, buf.b16.data(), ldb, 0.0f, buf.c16.data(), s.N);
        else
          tessera::kernels::packed_gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, buf.a16.data(),
                                        lda, buf.b16.data(), ldb, s.beta, buf.c.data(), s.N);
        break;
      case Backend::kWidenedBf16:
        if (bf16_out)
          tessera::kernels::detail::widened_gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f,
                                                 buf.a16.data(), lda, buf.b16.data(), ldb, 0.0f,
                                                 buf.c16.data(), s.N);
        else
          tessera::kernels::detail::widened_gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f,
                                                 buf.a16.data(), lda, buf.b16.data(), ldb, s.beta,
                                                 buf.c.data(), s.N);
        break;
      case Backend::kReorderBf16:
        dnn->reorder();
        break;
      case Backend::kReorderPackedBf16:
      case Backend::kReorderPackedF32:
        dnn->reorder();
        dnn->run();
        break;
      default:
        dnn->run();
    }
  };
  once();  // warm-up (primitive creation, first touch)
  for (auto _ : state) once();
  if (backend == Backend::kReorderBf16) {
    state.counters["GB/s"] = benchmark::Counter(static_cast<double>(s.K * s.N * sizeof(bf16)),
                                                benchmark::Counter::kIsIterationInvariantRate);
  } else {
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * s.M * s.N * s.K, benchmark::Counter::kIsIterationInvariantRate);
  }
  if (dnn) state.SetLabel(dnn->impl);
  if (backend == Backend::kTesseraBf16)
    state.SetLabel(tessera::kernels::bf16_gemm_path_name(tessera::kernels::bf16_gemm_path()));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const struct {
    Backend backend;
    const char* name;
  } backends[] = {{Backend::kOpenblas, "openblas/fp32"},
                  {Backend::kOnednnF32, "onednn/fp32"},
                  {Backend::kTesseraBf16, "tessera/bf16"},
                  {Backend::kBlockedF32, "blocked/fp32"},
                  {Backend::kBlockedBf16, "blocked/bf16"},
                  {Backend::kWidenedBf16, "widened/bf16"},
                  {Backend::kPackedF32, "onednn-packed/fp32"},
                  {Backend::kPackedBf16, "onednn-packed/bf16"},
                  {Backend::kReorderBf16, "reorder/bf16"},
                  {Backend::kReorderPackedBf16, "onednn-reorder+packed/bf16"},
                  {Backend::kReorderPackedF32, "onednn-reorder+packed/fp32"}};
  for (const Shape& s : shapes()) {
    for (const auto& b : backends) {
      if (!s.weight_is_b && is_packed(b.backend)) continue;
#ifndef TESSERA_BENCH_OPENBLAS
      if (b.backend == Backend::kOpenblas) continue;
#endif
      for (int threads : {1, 2}) {
        const std::string name = s.name + "/" + b.name + "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), [s, b, threads](benchmark::State& st) {
          run_bench(st, s, b.backend, threads);
        })->Unit(benchmark::kMillisecond);
      }
    }
  }
  // The reference every other benchmark quotes: measure_peak_gflops at the default thread count.
  tessera::set_num_threads(0);
  for (auto dtype : {tessera::DType::kF32, tessera::DType::kBF16}) {
    benchmark::AddCustomContext(std::string("peak_gflops_") + tessera::dtype_name(dtype) +
                                    "_threads" + std::to_string(tessera::num_threads()),
                                std::to_string(tessera::kernels::measure_peak_gflops(dtype)));
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
