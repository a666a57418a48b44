// DeepSpeed's JSON configuration (`--deepspeed --deepspeed_config ds.json`) for the sections
// Tessera covers, mapped onto tessera-train's arguments:
//   train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps
//       any two determine the third (train_batch_size = micro x accumulation x DP); all three
//       must agree; one alone sets the other two as DeepSpeed does (accumulation 1)
//   zero_optimization: stage, reduce_bucket_size (5e8), allgather_bucket_size (5e8),
//       overlap_comm (DeepSpeed's code: on for stage 3 only), contiguous_gradients (true),
//       stage3_prefetch_bucket_size (5e7), stage3_param_persistence_threshold (1e5),
//       stage3_max_live_parameters (1e9)
//   fp16: enabled, loss_scale (0 = dynamic), initial_scale_power (16), loss_scale_window (1000),
//       hysteresis (2), min_loss_scale (1);  bf16: enabled
//   optimizer: type Adam or AdamW (decoupled weight decay, DeepSpeed's default adam_w_mode),
//       params lr (1e-3), betas ([0.9, 0.999]), eps (1e-8), weight_decay (0)
//   scheduler: WarmupLR, WarmupDecayLR, WarmupCosineLR with their params
//   (optim/deepspeed_lr_schedule.h) gradient_clipping (0.0), steps_per_print (10),
//   wall_clock_breakdown (false; true means --timing-log-level 1)
// Defaults in parentheses are DeepSpeed's code defaults; they apply to anything the file leaves
// out unless the flag was given explicitly. A value that contradicts an explicit flag, a wrong
// type or an impossible value is a tessera::Error naming the file and key; an unknown key is a
// warning naming it.
#pragma once

#include <string>
#include <vector>

#include "tessera/train/arguments.h"

namespace tessera::train {

// Reads args.deepspeed_config and applies it to `args` for a data-parallel size of
// `data_parallel`. Returns the warnings (one line each). Throws tessera::Error.
std::vector<std::string> apply_deepspeed_config(TrainArgs& args, int64_t data_parallel);

}  // namespace tessera::train
