// tp_step: tensor-parallel overhead. Forward + backward (and the TP gradient completion) of one
// micro-batch of GPT-2 124M (B=4, T=256) with TP = the number of ranks, 1 thread per rank,
// printing the job's tokens/s and the share of the step spent in the TP layers' collectives
// (activation all-reduces, or all-gathers and reduce-scatters under --sequence-parallel; the
// cross-entropy's three all-reduces of B*T floats are not in it).
//
//   build/bin/tp_step [--steps S] [--dtype fp32|bf16] [--sequence-parallel]
//   mpirun -np 2 build/bin/tp_step ...
// bench/tensor_parallel.sh runs T=1 and T=2 and prints them side by side.
#include <cstdio>
#include <cstring>
#include <string>

#include "bench_models.h"
#include "tessera/comm/parallel_state.h"
#include "tessera/core/threads.h"
#include "tessera/distributed/tensor_parallel_grads.h"

int main(int argc, char** argv) {
  using namespace tessera;
  int steps = 5;
  std::string dtype_name = "fp32";
  bool sequence_parallel = false;
  for (int i = 1; i < argc; ++i) {
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
    comm::ParallelState state(world, comm::MeshLayout(world->size(), {.tensor = world->size()}));
    const parallel::TensorParallel tp(state.group(comm::GroupKind::kTensor), sequence_parallel);
    tp_size = tp.size();
    const model::ModelConfig cfg = bench::gpt2_124m();
    const int64_t B = 4, T = cfg.seq_length;
    model::GPTModel model(cfg, dtype, 1234, tp);
    distributed::TensorParallelGrads grads(model.params(), tp);
    const bench::BenchBatch data(cfg, B);
    double comm_in_timed = 0;
    step_s = bench::median_step_seconds(steps, [&](int s) {
      const double c0 = model.tensor_parallel().comm_seconds();
      model.params().zero_grads();
      model.forward_backward(data.batch, model.context(B, T, s * B, 1, s + 1, true), 1.0f / (B * T));
      grads.finalize();
      if (s > 0) comm_in_timed += model.tensor_parallel().comm_seconds() - c0;
    });
    comm_s = comm_in_timed / steps;  // mean per step (the step time is a median)
    if (world->rank() == 0) {
      std::printf("tp_step: gpt2-124m %s, B=%lld T=%lld, TP %d%s, 1 thread per rank, median of %d "
                  "steps\n", dtype_name.c_str(), static_cast<long long>(B),
                  static_cast<long long>(T), tp_size, tp.sequence_parallel() ? " + SP" : "", steps);
      std::printf("TP %d: step %.1f ms, %.0f tokens/s, TP collectives %.1f ms per step "
                  "(%.1f%% of the step)\n", tp_size, step_s * 1e3, B * T / step_s, comm_s * 1e3,
                  100 * comm_s / step_s);
    }
  }
  comm::shutdown();
  return 0;
}
