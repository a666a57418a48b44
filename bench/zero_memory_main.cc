// zero_memory: per-rank memory of the model states (parameters, gradients, optimizer state)
// under ZeRO stages 0-3, measured after one training iteration (2 micro-batches, optimizer step,
// parameter all-gather), printed beside the formula of the precision policy:
//   bf16: parameters 2Ψ + gradients 4Ψ (fp32 accumulation) + optimizer 12Ψ (fp32 master, m, v)
//   fp32: parameters 4Ψ + gradients 4Ψ + optimizer 8Ψ (m, v; the parameters are the master)
// stage >= 1 divides the optimizer term by DP, stage 2 also the gradient term, stage 3 also the
// parameter term (units below DeepSpeed's persistence threshold, 1e5 elements, stay whole). Ψ is this rank's
// flat buffer (padded to a multiple of DP). Parameters and gradients are measured as resident
// pages of their buffers (mincore), the optimizer state by the memory accountant; the peak
// resident set of the process (getrusage) is printed too: it includes the gradient buckets in
// flight during backward and the activations.
//
//   mpirun -np N build/bin/zero_memory --stage S [--dtype bf16|fp32] [--bucket ELEMS]
// bench/zero_memory.sh runs stages 0-3 at DP 1, 2, 4 and 8.
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_models.h"
#include "flag_pairs.h"
#include "tessera/comm/parallel_state.h"
#include "tessera/core/memory.h"
#include "tessera/core/threads.h"
#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/distributed/zero3_params.h"
#include "tessera/model/chunk_runner.h"
#include "tessera/optim/optimizer.h"

namespace {

using namespace tessera;

// GPT-2 style, 8 layers of 512: 51M parameters (25M of them the tied embedding).
model::ModelConfig bench_model() {
  model::ModelConfig c = model::preset("gpt2-124m");
  c.num_layers = 8;
  c.hidden_size = 512;
  c.num_attention_heads = 8;
  c.seq_length = 128;
  c.attention_dropout = c.hidden_dropout = 0.0f;
  return c;
}

double mib(double bytes) { return bytes / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  int stage = 0;
  int64_t bucket = 1'000'000;
  std::string dtype_name = "bf16";
  tessera::bench::require_flag_pairs(argc, argv, "zero_memory");
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--stage")) stage = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dtype")) dtype_name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--bucket")) bucket = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "zero_memory: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (stage < 0 || stage > 3 || (dtype_name != "bf16" && dtype_name != "fp32")) {
    std::fprintf(stderr, "zero_memory: --stage 0..3, --dtype bf16|fp32\n");
    return 2;
  }
  const DType dtype = dtype_name == "bf16" ? DType::kBF16 : DType::kF32;
  set_num_threads(1);
  {
    auto world = comm::ProcessGroup::world();
    comm::ParallelState mesh(world, comm::MeshLayout(world->size(), {}));
    auto dp = mesh.group(comm::GroupKind::kData);
    const int n = dp->size();
    const model::ModelConfig cfg = bench_model();
    model::GPTModel model(cfg, dtype, 1, {}, n);
    std::vector<distributed::FlatRange> units;
    if (stage == 3)
      for (const auto& [b, e] : model.units()) units.push_back({b, e});
    // DeepSpeed's stage-3 defaults (the plan's).
    const auto plan = distributed::ShardingPlan::for_stage(stage, bucket, true);
    distributed::DataParallelGrads grads(model.params(), dp, plan, units);
    std::unique_ptr<distributed::Zero3Params> zero3;
    model::ChunkRunner runner(model);
    if (stage == 3) {
      zero3 = std::make_unique<distributed::Zero3Params>(model.params(), dp, units, plan);
      runner.set_param_access(zero3.get());
    }
    optim::Optimizer::Ranges owned;
    if (stage >= 1)
      for (const auto& r : grads.owned()) owned.push_back({r.begin, r.end});
    optim::Optimizer opt(model.params(), {}, owned);

    const int64_t B = 1, T = cfg.seq_length, micro = 2;
    const bench::BenchBatch data(cfg, B);
    grads.start_iteration();
    for (int64_t m = 0; m < micro; ++m) {
      const bool reduce = grads.reduces_in(m, micro);
      if (reduce) runner.set_grads_ready_hook([&](int64_t offset) { grads.grads_ready(offset); });
      runner.forward_backward(data.batch, model.context(B, T, m, 1, 1, true), 1.0f / (micro * T));
      runner.set_grads_ready_hook(nullptr);
      if (reduce) grads.finish();
    }
    if (zero3) zero3->quiesce();
    opt.step(1e-4, 1.0f);
    grads.gather_values();
    if (zero3) zero3->after_step();

    const double psi = static_cast<double>(model.params().numel());
    const double p_bytes = resident_bytes(model.params().flat_values().raw(),
                                          model.params().flat_values().nbytes());
    const double g_bytes = resident_bytes(model.params().flat_grads().raw(),
                                          model.params().flat_grads().nbytes());
    const double o_bytes = static_cast<double>(
        MemoryAccountant::instance().snapshot().current[static_cast<int>(MemoryCategory::kOptimizer)]);
    const bool bf16 = dtype == DType::kBF16;
    const double p_want = (bf16 ? 2 : 4) * psi / (stage >= 3 ? n : 1);
    const double g_want = 4 * psi / (stage >= 2 ? n : 1);
    const double o_want = (bf16 ? 12 : 8) * psi / (stage >= 1 ? n : 1);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const double peak_rss = usage.ru_maxrss * 1024.0;
    if (world->rank() == 0) {
      const auto cell = [](double got, double want) {
        std::printf(" %8.1f / %8.1f (%+5.1f%%) |", mib(got), mib(want), 100 * (got / want - 1));
      };
      std::printf("| %d | %d | %s | %.1fM |", stage, n, dtype_name.c_str(), psi / 1e6);
      cell(p_bytes, p_want);
      cell(g_bytes, g_want);
      cell(o_bytes, o_want);
      cell(p_bytes + g_bytes + o_bytes, p_want + g_want + o_want);
      std::printf(" %8.1f |\n", mib(peak_rss));
    }
  }
  comm::shutdown();
  return 0;
}
