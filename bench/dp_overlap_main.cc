// dp_overlap: the iteration time of data-parallel training with the gradient reduction
// overlapped with backward (--overlap-grad-reduce) and after it, measured in the same run on
// the same ranks, alternating the two modes step by step so that machine noise hits both alike.
// GPT-2 124M (backward dominates), micro-batch B x 256 tokens (B = 1 unless --micro-batch-size),
// 1 thread per rank, ZeRO 0 or 1. Also the part of each mode's step after backward returned (the
// reduction's exposed time): after backward, the whole reduction; overlapped, what backward did
// not hide. Hidden = 1 - overlapped's / after's.
//
//   mpirun -np 2 build/bin/dp_overlap [--steps S] [--stage 0|1] [--bucket ELEMS]
//                                     [--micro-batch-size B] [--embedding-rows 0|1]
//
// --embedding-rows 0: the word embedding's gradient reduced whole after its backward (the last
// bucket) instead of by rows (distributed/data_parallel_grads.h), for comparison.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench_models.h"
#include "flag_pairs.h"
#include "tessera/comm/parallel_state.h"
#include "tessera/core/threads.h"
#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/model/chunk_runner.h"

int main(int argc, char** argv) {
  using namespace tessera;
  int steps = 6, stage = 0;
  int64_t B = 1;
  int64_t bucket = 10'000'000;
  bool embedding_rows = true;
  tessera::bench::require_flag_pairs(argc, argv, "dp_overlap");
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--stage")) stage = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--bucket")) bucket = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--micro-batch-size"))
      B = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--embedding-rows"))
      embedding_rows = std::atoi(argv[i + 1]) != 0;
    else {
      std::fprintf(stderr, "dp_overlap: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  set_num_threads(1);
  {
    auto world = comm::ProcessGroup::world();
    comm::ParallelState mesh(world, comm::MeshLayout(world->size(), {}));
    auto dp = mesh.group(comm::GroupKind::kData);
    const model::ModelConfig cfg = bench::gpt2_124m();
    const int64_t T = cfg.seq_length;
    model::GPTModel model(cfg, DType::kF32, 1, {}, dp->size());
    const auto [wte_begin, wte_end] = model.word_embedding_range();
    distributed::DataParallelGrads overlapped(
        model.params(), dp, distributed::ShardingPlan::for_stage(stage, bucket, true), {}, nullptr,
        {}, {{wte_begin, embedding_rows ? wte_end : wte_begin}, cfg.hidden_size, B * T});
    distributed::DataParallelGrads after(
        model.params(), dp, distributed::ShardingPlan::for_stage(stage, bucket, false));
    const bench::BenchBatch data(cfg, B);
    // Per mode: the step, and the part of it after backward returned (the reduction not hidden).
    std::vector<double> times[2], exposed[2];
    model::ChunkRunner runner(model);
    for (int s = 0; s <= steps; ++s) {
      for (int mode = 0; mode < 2; ++mode) {
        distributed::DataParallelGrads& g = mode == 0 ? overlapped : after;
        dp->barrier().wait();
        const auto t0 = std::chrono::steady_clock::now();
        g.start_iteration();
        runner.set_grads_ready_hook([&](int64_t offset) { g.grads_ready(offset); },
                                    g.embedding_rows());
        runner.forward_backward(data.batch, model.context(B, T, s, 1, s + 1, true), 1.0f / T);
        runner.set_grads_ready_hook(nullptr);
        const auto t1 = std::chrono::steady_clock::now();
        g.finish();
        const auto t2 = std::chrono::steady_clock::now();
        if (s > 0) {  // step 0 warms up
          times[mode].push_back(std::chrono::duration<double>(t2 - t0).count());
          exposed[mode].push_back(std::chrono::duration<double>(t2 - t1).count());
        }
      }
    }
    for (auto& t : times) std::sort(t.begin(), t.end());
    for (auto& t : exposed) std::sort(t.begin(), t.end());
    const double on = times[0][times[0].size() / 2], off = times[1][times[1].size() / 2];
    const double on_exposed = exposed[0][exposed[0].size() / 2];
    const double off_exposed = exposed[1][exposed[1].size() / 2];
    if (world->rank() == 0) {
      std::printf(
          "dp_overlap: gpt2-124m fp32, DP %d, ZeRO %d, B=%lld T=%lld, %d gradient buckets, "
          "1 thread per rank, median of %d alternating steps; overlapped: word embedding "
          "reduced %s\n",
          dp->size(), stage, static_cast<long long>(B), static_cast<long long>(T),
          overlapped.num_buckets(), steps, overlapped.embedding_rows() ? "by rows" : "whole, last");
      std::printf("gradients reduced per step: %.1f MB (fp32)\n",
                  4e-6 * static_cast<double>(model.params().numel()));
      std::printf(
          "reduction after backward returned: overlapped %.1f ms, after backward %.1f ms "
          "(hidden: %.1f%%)\n",
          on_exposed * 1e3, off_exposed * 1e3, 100.0 * (1.0 - on_exposed / off_exposed));
      std::printf("forward+backward+reduction: overlapped %.1f ms, after backward %.1f ms "
                  "(overlapped / after = %.3f)\n", on * 1e3, off * 1e3, on / off);
    }
  }
  comm::shutdown();
  return 0;
}
