// Activation recomputation: what each policy keeps and what it costs. For the LLaMA-style
// 124M model (bench_models.h) at one micro-batch of B x 256 tokens, bf16, one process:
//   - activation bytes held per layer per micro-batch between forward and backward, measured by
//     the memory accountant (held after forward, less the final hidden states, over L), beside
//     the analytic count of what each layer saves (model/transformer_layer.h Saved);
//   - the peak activation bytes of a forward + backward;
//   - the median step time, and its ratio to no recomputation (full recomputation reruns each
//     layer's forward once, about +1/3 of the layers' FLOPs).
//   build/bin/recompute [--steps S] [--batch B] [--threads N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench_models.h"
#include "flag_pairs.h"
#include "tessera/core/memory.h"
#include "tessera/core/threads.h"
#include "tessera/model/activation_memory.h"
#include "tessera/model/chunk_runner.h"

using namespace tessera;

namespace {

int64_t activations_now() {
  return MemoryAccountant::instance()
      .snapshot()
      .current[static_cast<int>(MemoryCategory::kActivations)];
}
int64_t activations_peak() {
  return MemoryAccountant::instance()
      .snapshot()
      .peak[static_cast<int>(MemoryCategory::kActivations)];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 3, threads = 0;
  int64_t B = 2;
  tessera::bench::require_flag_pairs(argc, argv, "recompute");
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch"))
      B = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "recompute: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  set_num_threads(threads);
  const model::ModelConfig cfg = bench::llama_124m();
  const DType dtype = DType::kBF16;
  const int64_t N = B * cfg.seq_length;
  bench::BenchBatch data(cfg, B);
  using G = model::RecomputePolicy::Granularity;
  struct Case {
    const char* name;
    model::RecomputePolicy policy;
  };
  const Case cases[] = {
      {"none", {}},
      {"selective", {G::kSelective, model::RecomputePolicy::Method::kUniform, 1}},
      {"full uniform 1", {G::kFull, model::RecomputePolicy::Method::kUniform, 1}},
  };
  std::printf(
      "LLaMA-style 124M (%d layers, hidden %d, ffn %d), micro-batch %lld x %lld tokens, "
      "bf16, %d threads\n",
      cfg.num_layers, cfg.hidden_size, cfg.ffn(), static_cast<long long>(B),
      static_cast<long long>(cfg.seq_length), num_threads());
  std::printf("%-15s | %-28s | %-12s | %-10s | %s\n", "policy", "held/layer MiB (analytic)",
              "peak MiB", "step ms", "step / none");
  double base_ms = 0;
  for (const Case& k : cases) {
    model::GPTModel m(cfg, dtype, 1);
    model::ChunkRunner runner(m);
    runner.set_recompute(k.policy);
    const auto ctx = m.context(B, cfg.seq_length, 0, 1, 1, true);
    double held_per_layer = 0;
    int64_t peak = 0;
    const double seconds = bench::median_step_seconds(steps, [&](int) {
      MemoryAccountant::instance().reset_peaks();
      const int64_t before = activations_now();
      model::ChunkActivations act;
      runner.forward_chunk(0, Tensor(), data.batch, ctx, &act);
      const int64_t held = activations_now() - before - act.output.nbytes();
      held_per_layer = static_cast<double>(held) / cfg.num_layers;
      model::LossSum loss;
      runner.backward_chunk(0, Tensor(), data.batch, ctx, 1e-6f, act, &loss);
      peak = activations_peak() - before;
    });
    const double ms = seconds * 1e3;
    if (base_ms == 0) base_ms = ms;
    char held[64];
    std::snprintf(held, sizeof held, "%.2f (%.2f)", held_per_layer / (1 << 20),
                  model::layer_activation_bytes(cfg, N, dtype, k.policy.granularity) / (1 << 20));
    std::printf("%-15s | %-28s | %-12.1f | %-10.1f | %.3f\n", k.name, held,
                static_cast<double>(peak) / (1 << 20), ms, ms / base_ms);
  }
  // Megatron-LM's per-layer estimate (Korthikanti et al. 2022, 16-bit, no dropout masks here):
  // s*b*h*(34 + 5*a*s/h) with the attention matrix, 34*s*b*h selective; for comparison only, as
  // the flash-style kernel keeps no T x T matrix and no dropout mask is stored.
  const double sbh = static_cast<double>(N) * cfg.hidden_size;
  std::printf(
      "Megatron's estimate per layer: %.2f MiB (no recompute, with the T x T matrices), "
      "%.2f MiB (selective)\n",
      sbh * (34 + 5.0 * cfg.num_attention_heads * cfg.seq_length / cfg.hidden_size) / (1 << 20),
      sbh * 34 / (1 << 20));
  return 0;
}
