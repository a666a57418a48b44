// The run's ShardingPlan (distributed/sharding_plan.h) from its flags, normalised in one place:
// the ZeRO stage (--zero-stage, with --use-distributed-optimizer meaning at least stage 1),
// Megatron's default gradient bucket (max(40M, 1M x DP) elements, --ddp-bucket-size overrides),
// --overlap-grad-reduce and the --stage3-* sizes. A DeepSpeed config has already been applied
// to the flags (train/deepspeed_config.h).
#pragma once

#include "tessera/distributed/sharding_plan.h"
#include "tessera/train/arguments.h"

namespace tessera::train {

// The ZeRO stage the flags ask for, 0..3.
int effective_zero_stage(const TrainArgs& args);

// The plan for `data_parallel` ranks.
distributed::ShardingPlan sharding_plan(const TrainArgs& args, int data_parallel);

}  // namespace tessera::train
