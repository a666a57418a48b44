// tp_step: tensor-parallel overhead. Forward + backward (with the TP gradient completion and, when
// DP > 1, the data-parallel gradient all-reduce) of one micro-batch of GPT-2 124M (B=4, T=256)
// per data-parallel rank, 1 thread per rank, printing the job's tokens/s and the share of the
// step spent in the TP layers' collectives (activation all-reduces, or all-gathers and
// reduce-scatters under --sequence-parallel; the cross-entropy's three all-reduces of B*T floats
// are not in it). TP = --tensor (default: every rank), DP = ranks / TP.
//
//   mpirun -np 2 build/bin/tp_step [--tensor T] [--steps S] [--dtype fp32|bf16] [--sequence-parallel]
// bench/tensor_parallel.sh runs TP 1 and TP 2 on two ranks and prints them side by side.
#include <cstdio>
#include <cstring>
#include <string>

#include "bench_models.h"
#include "tessera/comm/parallel_state.h"
#include "tessera/core/threads.h"
#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/distributed/tensor_parallel_grads.h"
#include "tessera/model/chunk_runner.h"

int main(int argc, char** argv) {
  using namespace tessera;
  int steps = 5;
  std::string dtype_name = "fp32";
  bool sequence_parallel = false;
  int tensor = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tensor") && i + 1 < argc) {
      tensor = std::atoi(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) dtype_name = argv[++i];
    else if (!std::strcmp(argv[i], "--sequence-parallel")) sequence_parallel = true;
    else {
      std::fprintf(stderr, "tp_step: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (dtype_name != "fp32" && dtype_name != "bf16") {
    std::fprintf(stderr, "tp_step: --dtype must be fp32 or bf16\n");
    return 2;
  }
  const DType dtype = dtype_name == "bf16" ? DType::kBF16 : DType::kF32;
  set_num_threads(1);
  double step_s = 0, comm_s = 0;
  int tp_size = 1;
  {
    auto world = comm::ProcessGroup::world();
    comm::ParallelState state(
        world, comm::MeshLayout(world->size(), {.tensor = tensor > 0 ? tensor : world->size()}));
    const parallel::TensorParallel tp(state.group(comm::GroupKind::kTensor), sequence_parallel);
    tp_size = tp.size();
    auto dp = state.group(comm::GroupKind::kData);
    const int dp_size = dp->size();
    const model::ModelConfig cfg = bench::gpt2_124m();
    const int64_t B = 4, T = cfg.seq_length;
    model::GPTModel model(cfg, dtype, 1234, tp, dp_size);
    distributed::TensorParallelGrads grads(model.params(), tp);
    distributed::DataParallelGrads dp_grads(model.params(), dp,
                                            distributed::ShardingPlan::for_stage(0, 40'000'000, true));
    const bench::BenchBatch data(cfg, B);
    double comm_in_timed = 0;
    model::ChunkRunner runner(model);
    step_s = bench::median_step_seconds(steps, [&](int s) {
      const double c0 = model.tensor_parallel().comm_seconds();
      dp_grads.start_iteration();
      runner.set_grads_ready_hook([&](int64_t offset) { dp_grads.grads_ready(offset); });
      runner.forward_backward(data.batch, model.context(B, T, s * B, 1, s + 1, true),
                              1.0f / (B * T));
      runner.set_grads_ready_hook(nullptr);
      dp_grads.finish();
      grads.finalize();
      if (s > 0) comm_in_timed += model.tensor_parallel().comm_seconds() - c0;
    });
    comm_s = comm_in_timed / steps;  // mean per step (the step time is a median)
    if (world->rank() == 0) {
      std::printf("tp_step: gpt2-124m %s, B=%lld T=%lld per DP rank, %d ranks, 1 thread per rank, "
                  "median of %d steps\n", dtype_name.c_str(), static_cast<long long>(B),
                  static_cast<long long>(T), world->size(), steps);
      std::printf("TP %d%s x DP %d: step %.1f ms, %.0f tokens/s, TP collectives %.1f ms per step "
                  "(%.1f%% of the step)\n", tp_size, tp.sequence_parallel() ? " + SP" : "",
                  dp_size, step_s * 1e3, B * T * dp_size / step_s, comm_s * 1e3,
                  100 * comm_s / step_s);
    }
  }
  comm::shutdown();
  return 0;
}
