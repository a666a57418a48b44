// "auto" values in a DeepSpeed config, resolved as the Hugging Face integration resolves them
// (transformers/integrations/deepspeed.py: HfTrainerDeepSpeedConfig.trainer_config_process and
// trainer_config_finalize), from tessera-train's flags where Hugging Face reads its
// TrainingArguments, and from the model for the hidden-size keys:
//   train_micro_batch_size_per_gpu  --micro-batch-size
//   train_batch_size                --global-batch-size when given, else micro x DP x the file's
//                                   gradient_accumulation_steps (1 when absent or "auto")
//   gradient_accumulation_steps     train_batch_size / (micro x DP), which must divide
//   gradient_clipping               --clip-grad
//   optimizer.params lr / betas / eps / weight_decay
//                                   --lr (must be given) / --adam-beta1,2 / --adam-eps /
//                                   --weight-decay
//   scheduler.params warmup_min_lr 0, warmup_max_lr --lr, total_num_steps --lr-decay-iters else
//                                   --train-iters, warmup_num_steps --lr-warmup-iters else
//                                   ceil(--lr-warmup-fraction x total_num_steps) else 0
//   fp16.enabled --fp16; bf16.enabled and bfloat16.enabled --bf16; amp.enabled false
//   zero_optimization reduce_bucket_size hidden^2, stage3_prefetch_bucket_size int(0.9 hidden^2),
//                                   stage3_param_persistence_threshold 10 hidden (Hugging Face
//                                   fills the stage-3 two at stage 3 only; below stage 3 they
//                                   have no effect, so Tessera fills them at any stage)
// Which keys take "auto" is the key table's auto_from column (deepspeed_keys.h). A no-effect key
// may say "auto" (it is not used); any other "auto", or one whose source is missing (--lr not
// given, no --train-iters), is a tessera::Error naming the key.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tessera/train/arguments.h"

namespace tessera::train {

struct ResolvedAuto {
  std::vector<std::string> lines;  // one per key: "KEY \"auto\" = VALUE (SOURCE)"
  std::set<std::string> paths;     // the dotted paths that were "auto"
};

// Replaces every resolvable "auto" in `config` by its value for a data-parallel size of
// `data_parallel`. `file` names the config in messages. Throws tessera::Error.
ResolvedAuto resolve_deepspeed_auto(nlohmann::json& config, const TrainArgs& args,
                                    int64_t data_parallel, const std::string& file);

}  // namespace tessera::train
