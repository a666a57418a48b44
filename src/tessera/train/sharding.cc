#include "tessera/train/sharding.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::train {

int effective_zero_stage(const TrainArgs& args) {
  const int stage = std::max(args.zero_stage, args.use_distributed_optimizer ? 1 : 0);
  if (stage < 0 || stage > 3)
    throw Error("--zero-stage " + std::to_string(args.zero_stage) + ": expected 0, 1, 2 or 3");
  return stage;
}

distributed::ShardingPlan sharding_plan(const TrainArgs& args, int data_parallel) {
  distributed::ShardingPlan plan;
  plan.stage = static_cast<distributed::ShardingPlan::Stage>(effective_zero_stage(args));
  plan.bucket_elems = args.ddp_bucket_size > 0
                          ? args.ddp_bucket_size
                          : std::max<int64_t>(40'000'000, int64_t{1'000'000} * data_parallel);
  plan.overlap_grad_reduce = args.overlap_grad_reduce;
  plan.grad_reduce_dtype = args.grad_reduce_in_bf16 ? DType::kBF16 : args.communication_data_type;
  plan.persistence_threshold = args.stage3_param_persistence_threshold;
  plan.prefetch_elems = args.stage3_prefetch_bucket_size;
  plan.max_live_elems = args.stage3_max_live_parameters;
  return plan;
}

}  // namespace tessera::train
