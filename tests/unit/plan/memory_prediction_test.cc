// The kept activations tessera-plan reports (plan/memory_prediction.h kept_activations, the
// `kept_activations_bytes` of --json) against a count by hand from the per-layer bytes
// (model/activation_memory.h, itself held against the memory accountant elsewhere): what the
// layers keep for the micro-batches in flight when the first backward starts, and nothing the
// activations' peak adds besides (the layer being recomputed, transfer buffers, working set).
#include "tessera/plan/memory_prediction.h"

#include <gtest/gtest.h>

#include "tessera/model/activation_memory.h"
#include "tessera/train/rank_layout.h"
#include "testing/parse_flags.h"

namespace tessera::plan {
namespace {

using G = model::RecomputePolicy::Granularity;

struct Planned {
  train::TrainArgs args;
  std::vector<train::RankLayout> ranks;
};

// gpt2-tiny, 4 layers of C 128, 8 micro-batches of 2 x 64 tokens (global batch 16), bf16.
Planned planned(int world, std::vector<std::string> flags) {
  for (const char* f : {"--mock-data", "--lr", "1e-3", "--train-iters", "1", "--model", "gpt2-tiny",
                        "--hidden-size", "128", "--num-attention-heads", "4", "--num-layers", "4",
                        "--global-batch-size", "16", "--micro-batch-size", "2", "--bf16"})
    flags.push_back(f);
  train::TrainArgs args = testing::parse_flags(flags);
  const comm::MeshLayout mesh = train::prepare_layout(args, world);
  return {args, train::rank_layouts(args, mesh, 1)};
}

double layer_bytes(const Planned& p, G granularity, int tp = 1, bool sp = false) {
  return model::layer_activation_bytes(p.args.model, 2 * 64, DType::kBF16, granularity, tp, sp);
}

TEST(KeptActivations, OneRankKeepsOneMicroBatchOfEveryLayer) {
  const Planned p = planned(1, {});
  const RankMemoryPrediction m = predict_rank_memory(p.args.model, p.ranks[0]);
  EXPECT_DOUBLE_EQ(m.kept_activations, 4 * layer_bytes(p, G::kNone));
  // The peak adds the backward's working set and the output layer's: strictly more.
  EXPECT_GT(m.categories[3], m.kept_activations);
}

TEST(KeptActivations, OneFOneBStageKeepsItsInFlightMicroBatches) {
  // PP 2 x TP 2 with SP: stage 0 holds min(P, M) = 2 micro-batches of its 2 layers, stage 1 one;
  // each layer's bytes are one TP rank's with the residual rows split.
  const Planned p = planned(4, {"--pipeline-model-parallel-size", "2",
                                "--tensor-model-parallel-size", "2", "--sequence-parallel"});
  for (const train::RankLayout& r : p.ranks) {
    const double in_flight = r.pp_rank == 0 ? 2 : 1;
    EXPECT_DOUBLE_EQ(predict_rank_memory(p.args.model, r).kept_activations,
                     in_flight * 2 * layer_bytes(p, G::kNone, 2, true))
        << "pp rank " << r.pp_rank;
  }
}

TEST(KeptActivations, FullRecomputationKeepsEachLayersInputNotTheRerun) {
  const Planned p = planned(1, {"--recompute-granularity", "full", "--recompute-method",
                                "uniform", "--recompute-num-layers", "1"});
  const RankMemoryPrediction m = predict_rank_memory(p.args.model, p.ranks[0]);
  // Each layer's input: 128 tokens x 128 bf16 values.
  EXPECT_DOUBLE_EQ(m.kept_activations, 4 * 2.0 * 128 * 128);
  EXPECT_DOUBLE_EQ(layer_bytes(p, G::kFull), 2.0 * 128 * 128);
}

// The blocks' resident pages at the peak (resident_blocks_bytes; held against measured resident
// sets in cli.plan_memory): the accountant's peak where nothing is given back, less at ZeRO 3 by
// at most the unowned parameter and gradient parts, and less by exactly the gathered unowned
// parameters that prefetching adds.
TEST(ResidentBlocks, ZeroThreeAloneGivesPagesBack) {
  for (const char* stage : {"0", "1", "2"}) {
    const Planned p = planned(2, {"--zero-stage", stage});
    const RankMemoryPrediction m = predict_rank_memory(p.args.model, p.ranks[0]);
    EXPECT_DOUBLE_EQ(m.resident_blocks_bytes, m.peak_bytes) << "ZeRO " << stage;
  }
  const Planned one = planned(1, {"--zero-stage", "3"});  // DP 1: nothing unowned
  const RankMemoryPrediction alone = predict_rank_memory(one.args.model, one.ranks[0]);
  EXPECT_DOUBLE_EQ(alone.resident_blocks_bytes, alone.peak_bytes);

  const Planned p = planned(2, {"--zero-stage", "3"});
  const RankMemoryPrediction m = predict_rank_memory(p.args.model, p.ranks[0]);
  const double unowned_params = m.allocated_parameters - m.categories[0];
  const double unowned_grads = m.allocated_gradients - m.categories[1];
  EXPECT_GT(unowned_params, 0);
  EXPECT_LT(m.resident_blocks_bytes, m.peak_bytes);
  EXPECT_GE(m.resident_blocks_bytes, m.peak_bytes - unowned_params - unowned_grads);
  // Without prefetching only the head's units are whole when backward starts.
  train::RankLayout no_prefetch = p.ranks[0];
  no_prefetch.prefetch_elements = 0;
  const RankMemoryPrediction n = predict_rank_memory(p.args.model, no_prefetch);
  const train::Zero3BackwardStart start =
      train::theoretical_zero3_backward_start(p.args.model, p.ranks[0]);
  const double gathered =
      start.whole_unowned -
      train::theoretical_zero3_backward_start(p.args.model, no_prefetch).whole_unowned;
  EXPECT_GT(gathered, 0);
  // Each gathered unit's unowned part is its owned part (DP 2), sent while the unit is in flight.
  EXPECT_DOUBLE_EQ(gathered, start.sends);
  EXPECT_DOUBLE_EQ(m.resident_blocks_bytes - m.peak_bytes,
                   n.resident_blocks_bytes - n.peak_bytes + gathered);
}

}  // namespace
}  // namespace tessera::plan
