// ShardingPlan: what data parallelism shards and how, decided once from the run's flags
// (train/sharding.h) and read by everything that depends on it: the gradient reducer
// (DataParallelGrads), ZeRO 3's parameter gathers (Zero3Params), the optimizer's owned ranges,
// checkpoints (the stage in their metadata) and the export of sharded master weights.
//
// The stages are ZeRO's (Rajbhandari et al. 2020; DeepSpeed's zero_optimization.stage):
//   kReplicated (0)      every DP rank holds all parameters, gradients and optimizer state;
//   kOptimizerStates (1) each rank owns part of every gradient bucket: its optimizer state and
//                        its reduced gradients (Megatron's --use-distributed-optimizer);
//   kGradients (2)       as 1, and gradients are reduce-scattered every micro-batch, the unowned
//                        parts released;
//   kParameters (3)      as 2, and parameters too live sharded, gathered per model unit around
//                        each use.
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera::distributed {

struct ShardingPlan {
  enum class Stage : int { kReplicated = 0, kOptimizerStates = 1, kGradients = 2, kParameters = 3 };
  Stage stage = Stage::kReplicated;
  // Gradient buckets of about this many elements (stages 0-2; stage 3 has one per unit).
  int64_t bucket_elems = 40'000'000;
  // Reduce buckets while backward runs (as soon as their gradients are final).
  bool overlap_grad_reduce = true;
  // The type the buckets' reductions send and sum in: kF32, or kBF16 / kF16 (each partial sum
  // rounded to it; comm/process_group.h "Reductions in 16 bits"). Accumulation stays fp32.
  DType grad_reduce_dtype = DType::kF32;
  // Stage 3 (DeepSpeed's stage3_* settings, distributed/zero3_params.h): units smaller than
  // persistence_threshold stay whole; prefetch_elems bounds the units gathered ahead;
  // max_live_elems bounds all gathered units.
  int64_t persistence_threshold = 100'000;
  int64_t prefetch_elems = 50'000'000;
  int64_t max_live_elems = 1'000'000'000;

  // A plan of ZeRO stage `zero_stage` (0..3) with the given bucket and overlap, the stage-3 sizes
  // at their defaults (tests and benchmarks; a run's plan comes from its flags).
  static ShardingPlan for_stage(int zero_stage, int64_t bucket_elems, bool overlap) {
    TESSERA_CHECK(zero_stage >= 0 && zero_stage <= 3);
    ShardingPlan plan;
    plan.stage = static_cast<Stage>(zero_stage);
    plan.bucket_elems = bucket_elems;
    plan.overlap_grad_reduce = overlap;
    return plan;
  }

  // The stage's number, as DeepSpeed writes it (logs, checkpoint metadata).
  int zero_stage() const { return static_cast<int>(stage); }
  // Optimizer state and reduced gradients exist only for this rank's owned parts.
  bool shards_optimizer_state() const { return stage >= Stage::kOptimizerStates; }
  // Gradients are reduced in every micro-batch and their unowned parts released.
  bool shards_gradients() const { return stage >= Stage::kGradients; }
  // Parameters are sharded too and gathered per unit around each use.
  bool shards_parameters() const { return stage == Stage::kParameters; }
};

}  // namespace tessera::distributed
