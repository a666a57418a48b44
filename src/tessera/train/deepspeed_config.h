// DeepSpeed's JSON configuration (`--deepspeed --deepspeed_config ds.json`) mapped onto
// tessera-train's arguments. Every key is first classified by the key table
// (deepspeed_keys.h: implemented / no effect / refused, with reasons; unknown keys are errors),
// after "auto" values were resolved from the flags and the model as Hugging Face's Trainer does
// (deepspeed_auto.h). The implemented keys:
//   train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps
//       any two determine the third (train_batch_size = micro x accumulation x DP); all three
//       must agree; one alone sets the other two as DeepSpeed does (accumulation 1)
//   zero_optimization: stage, reduce_bucket_size (5e8), allgather_bucket_size (5e8),
//       overlap_comm (DeepSpeed's code: on for stage 3 only), contiguous_gradients (true),
//       offload_optimizer (device none|cpu|nvme, nvme_path, buffer_count 4, pipeline_read,
//       pipeline_write, fast_init), offload_param (device, nvme_path, buffer_count 5,
//       buffer_size 1e8, max_in_cpu 1e9), sub_group_size (1e9) (deepspeed_offload.cc),
//       stage3_prefetch_bucket_size (5e7),
//       stage3_param_persistence_threshold (1e5), stage3_max_live_parameters (1e9)
//   fp16: enabled, loss_scale (0 = dynamic), initial_scale_power (16), loss_scale_window (1000),
//       hysteresis (2), min_loss_scale (1);  bf16.enabled, or its legacy spelling
//       bfloat16.enabled (not both)
//   communication_data_type: "fp32" (Tessera's default), "bf16" or "fp16" (the type gradients
//       are reduced in); data_types.grad_accum_dtype: "fp32" (what Tessera does) only
//   optimizer: type Adam or AdamW (decoupled weight decay, DeepSpeed's default adam_w_mode),
//       params lr (1e-3), betas ([0.9, 0.999]), eps (1e-8), weight_decay (0); or SGD
//       (torch.optim.SGD: lr, momentum (0), weight_decay (0) as L2 on the gradient)
//   scheduler: WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle with their params
//       (optim/deepspeed_lr_schedule.h; OneCycle's cycle_momentum cycles Adam's beta1 and turns
//       itself off for SGD, as DeepSpeed's does)
//   activation_checkpointing: DeepSpeed's block configures the checkpointing the model code
//       calls; Tessera's model calls it on every layer, so the block means --recompute-granularity
//       full --recompute-method uniform with --recompute-num-layers ceil(layers per pipeline rank
//       / number_checkpoints) (1 without number_checkpoints); its other keys have no effect
//   aio: block_size (1 MiB), queue_depth (8), intra_op_parallelism (1), single_submit (false),
//       overlap_events (true): the NVMe swap I/O
//   gradient_clipping (0.0), steps_per_print (10), wall_clock_breakdown (false; true means
//       --timing-log-level 1), tensorboard (enabled, output_path, job_name)
// Defaults in parentheses are DeepSpeed's code defaults; they apply to anything the file leaves
// out unless the flag was given explicitly. A value that contradicts an explicit flag, a wrong
// type or an impossible value is a tessera::Error naming the file and key.
#pragma once

#include <string>
#include <vector>

#include "tessera/train/arguments.h"

namespace tessera::train {

struct DeepSpeedApplied {
  std::vector<std::string> warnings;  // keys with no effect on this backend, one line each
  std::vector<std::string> info;      // "auto" values resolved, what activation_checkpointing set
};

// Reads args.deepspeed_config and applies it to `args` (its model and flags already resolved)
// for a data-parallel size of `data_parallel`. Throws tessera::Error.
DeepSpeedApplied apply_deepspeed_config(TrainArgs& args, int64_t data_parallel);

// Prints the warnings (stderr, "warning: ...") and the info lines (stdout,
// "> deepspeed config: ..."): once, by the rank that reports for the job.
void print_deepspeed_report(const DeepSpeedApplied& applied);

}  // namespace tessera::train
