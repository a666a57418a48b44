// moe_layer: forward + backward of one MoE block (model/moe_layer.h) against the dense MLP of
// the same expert shape, measured in the same run with their steps interleaved, in fp32 and bf16.
// The figure is active GFLOP/s: the FLOPs a token actually costs (k experts' MLPs plus the
// router; Megatron counts MoE FLOPs the same way), 3 passes x 2 FLOPs per multiply-add, over the
// step time. The MoE block is dropless, so its experts see uneven row counts (whatever the router
// chose); the dense MLP runs the same N tokens through one MLP of the expert's size, so MoE / dense
// says how much the routing, permutation and the per-expert GEMMs over fewer rows cost.
//
// With --ep P under `mpirun -np P`, the experts are split over the P ranks (expert parallelism,
// each rank routing its own N tokens) and the line adds the all-to-all exchange's share of the
// MoE step (moe::exchange_seconds()).
//
// Usage: build/bin/moe_layer [--threads N] [--steps S] [--experts E] [--topk K] [--tokens N]
//                            [--hidden C] [--ffn F] [--swiglu] [--ep P]
// Default: gpt2-124m's MLP width (C 768, F 3072, GELU with biases), 8 experts, top 2,
// N = 1024 tokens (micro-batch 4 x 256).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_models.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/threads.h"
#include "tessera/kernels/build_info.h"
#include "tessera/kernels/gemm.h"
#include "tessera/model/mlp.h"
#include "tessera/model/moe_layer.h"

namespace {

using tessera::DType;
using tessera::Tensor;
using namespace tessera::model;

int arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}
bool flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

Tensor random_rows(int64_t N, int64_t C, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor f = Tensor::empty({N, C}, DType::kF32);
  for (int64_t i = 0; i < N * C; ++i) f.data<float>()[i] = nd(gen);
  return dtype == DType::kF32 ? f : f.to(dtype, tessera::MemoryCategory::kActivations);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = arg(argc, argv, "--threads", 2), steps = arg(argc, argv, "--steps", 7);
  const int ep = arg(argc, argv, "--ep", 1);
  std::shared_ptr<tessera::comm::ProcessGroup> world;
  if (ep > 1) {
    world = tessera::comm::ProcessGroup::world();
    if (world->size() != ep) {
      std::fprintf(stderr, "moe_layer: --ep %d needs mpirun -np %d, got %d ranks\n", ep, ep,
                   world->size());
      return 2;
    }
    if (world->rank() != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  }
  tessera::set_num_threads(threads);
  ModelConfig cfg;
  cfg.num_layers = 12;  // only the init scale of the down projections reads it
  cfg.hidden_size = arg(argc, argv, "--hidden", 768);
  cfg.num_attention_heads = 12;
  cfg.ffn_hidden_size = arg(argc, argv, "--ffn", 3072);
  cfg.swiglu = flag(argc, argv, "--swiglu");
  cfg.add_bias_linear = !cfg.swiglu;
  cfg.moe.num_experts = arg(argc, argv, "--experts", 8);
  cfg.moe.topk = arg(argc, argv, "--topk", 2);
  cfg.moe.aux_loss_coeff = 1e-2f;
  cfg.validate();
  const int64_t N = arg(argc, argv, "--tokens", 1024), C = cfg.hidden_size, F = cfg.ffn();
  const int64_t B = 4;

  std::printf("%s\n", tessera::kernels::version_line().c_str());
  std::printf("moe_layer: %d experts, top %d, C %lld, F %lld (%s), %lld tokens, %d threads, "
              "median of %d steps, EP %d\n",
              cfg.moe.num_experts, cfg.moe.topk, static_cast<long long>(C),
              static_cast<long long>(F), cfg.swiglu ? "SwiGLU" : "GELU",
              static_cast<long long>(N), threads, steps, ep);
  const double peak_f32 = tessera::kernels::measure_peak_gflops(DType::kF32);
  const double peak_bf16 = tessera::kernels::measure_peak_gflops(DType::kBF16);
  std::printf("GEMM peak measured now (2048^3): fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n", peak_f32,
              peak_bf16);
  // Multiply-adds per token: one MLP, and the router.
  const double mlp_macs = (cfg.swiglu ? 3.0 : 2.0) * C * F;
  const double dense_flops = 3.0 * 2.0 * mlp_macs * N;
  const double moe_flops = 3.0 * 2.0 * (cfg.moe.topk * mlp_macs + C * cfg.moe.num_experts) * N;
  std::printf("%-6s %-8s %10s %12s %14s %12s %16s\n", "dtype", "block", "step (ms)", "GFLOP/s",
              "of dtype peak", "MoE/dense", "all-to-all share");

  const tessera::parallel::TensorParallel tp;  // one rank
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    ParameterSet params;
    MoeLayer::declare(params, "moe", cfg, ep == 1);
    if (ep > 1) MoeLayer::declare_experts(params, "moe", cfg, ep, world->rank());
    Mlp::declare(params, "dense", cfg);
    params.allocate(dtype, 1234);
    const MoeLayer moe(params, "moe", cfg, &tp, world.get());
    const Mlp dense(params, "dense", cfg, &tp);
    const Tensor x = random_rows(N, C, dtype, 1), dy = random_rows(N, C, dtype, 2);
    StepContext ctx = StepContext::make(B, N / B, 0, 1, 1, true);
    ctx.moe_aux_loss_scale = 1.0 / 1024;
    std::vector<double> exchange;  // per timed MoE step
    std::vector<std::function<void(int)>> variants = {
        [&](int step) {
          const double before = tessera::moe::exchange_seconds();
          MoeLayer::Saved s;
          moe.forward(x, s, ctx);
          moe.backward(dy, s, ctx);
          if (step > 0) exchange.push_back(tessera::moe::exchange_seconds() - before);
        },
        [&](int) {
          Mlp::Saved s;
          dense.forward(x, s, B);
          dense.backward(dy, s, B);
        }};
    const std::vector<double> t = tessera::bench::interleaved_median_step_seconds(steps, variants);
    const double peak = dtype == DType::kF32 ? peak_f32 : peak_bf16;
    const double moe_rate = moe_flops / t[0] / 1e9, dense_rate = dense_flops / t[1] / 1e9;
    std::sort(exchange.begin(), exchange.end());
    std::printf("%-6s %-8s %10.2f %12.1f %13.1f%% %12.2f", tessera::dtype_name(dtype), "moe",
                t[0] * 1e3, moe_rate, 100 * moe_rate / peak, moe_rate / dense_rate);
    if (ep > 1)
      std::printf(" %15.1f%%", 100 * exchange[exchange.size() / 2] / t[0]);
    std::printf("\n");
    std::printf("%-6s %-8s %10.2f %12.1f %13.1f%%\n", tessera::dtype_name(dtype), "dense",
                t[1] * 1e3, dense_rate, 100 * dense_rate / peak);
  }
  world.reset();
  if (ep > 1) tessera::comm::shutdown();
  return 0;
}
