#include "tessera/train/deepspeed_keys.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::train {
namespace {

using K = DeepSpeedKeyClass;
constexpr K kImpl = K::kImplemented, kNone = K::kNoEffect, kRefuse = K::kRefused;

// Shared reasons.
constexpr std::string_view kOneBit =
    "a parameter of DeepSpeed's 1-bit Adam / 0/1 Adam / (1-bit) LAMB, which are not implemented";
constexpr std::string_view kLrRange = "LRRangeTest (a learning-rate range test) is not implemented";
constexpr std::string_view kOffloadRest =
    "tunes a split of the state between GPU and CPU memory (e.g. ratio), which this backend, "
    "whose device memory is host memory, does not have";
constexpr std::string_view kTorchImpl =
    "a choice of PyTorch kernel; Tessera's optimizer is one fused pass with torch.optim's "
    "arithmetic";

// Rows in the order of DeepSpeed's docs/_pages/config-json.md, then keys its
// deepspeed/runtime/config.py reads that the page does not list.
const std::vector<DeepSpeedKey> kTable = {
    // Batch size.
    {"train_batch_size",
     kImpl,
     "--global-batch-size; any two of the three batch keys (an explicit flag counts as one) "
     "determine the third, train_batch_size = micro x accumulation x DP",
     {},
     "--global-batch-size (given), else micro x DP x the file's accumulation"},
    {"train_micro_batch_size_per_gpu", kImpl, "--micro-batch-size", {}, "--micro-batch-size"},
    {"gradient_accumulation_steps",
     kImpl,
     "micro-batches per iteration (= global / (micro x DP))",
     {},
     "derived: train_batch_size / (micro x DP)"},
    // Optimizer.
    {"optimizer.type", kImpl,
     "Adam / AdamW (decoupled weight decay) or SGD (torch.optim.SGD); others (Lamb, OneBitAdam, "
     "ZeroOneAdam, OneBitLamb, Adagrad, ...) are refused by name"},
    {"optimizer.params.lr", kImpl, "--lr", {}, "--lr"},
    {"optimizer.params.betas",
     kImpl,
     "--adam-beta1, --adam-beta2 (Adam/AdamW)",
     {},
     "--adam-beta1, --adam-beta2"},
    {"optimizer.params.eps", kImpl, "--adam-eps (Adam/AdamW)", {}, "--adam-eps"},
    {"optimizer.params.weight_decay",
     kImpl,
     "--weight-decay (decoupled for Adam/AdamW, L2 added to the gradient for SGD, as torch)",
     {},
     "--weight-decay"},
    {"optimizer.params.adam_w_mode", kImpl,
     "true: AdamW; false (L2-coupled Adam) is refused, not implemented"},
    {"optimizer.params.torch_adam", kNone, kTorchImpl},
    {"optimizer.params.momentum", kImpl, "--sgd-momentum (SGD; torch's default 0)"},
    {"optimizer.params.dampening", kRefuse, "SGD dampening is not implemented", "0"},
    {"optimizer.params.nesterov", kRefuse, "Nesterov momentum is not implemented", "false"},
    {"optimizer.params.maximize", kRefuse, "maximizing the objective is not implemented", "false"},
    {"optimizer.params.amsgrad", kRefuse, "AMSGrad is not implemented", "false"},
    {"optimizer.params.bias_correction", kRefuse, "Adam without bias correction is not implemented",
     "true"},
    {"optimizer.params.foreach", kNone, kTorchImpl},
    {"optimizer.params.fused", kNone, kTorchImpl},
    {"optimizer.params.capturable", kNone, "CUDA-graph capture; there is no GPU"},
    {"optimizer.params.differentiable", kNone,
     "autograd through the step; Tessera has no autograd"},
    {"optimizer.params.set_grad_none", kNone,
     "Tessera zeroes its one flat gradient buffer in place"},
    {"optimizer.params.freeze_step", kRefuse, kOneBit},
    {"optimizer.params.cuda_aware", kRefuse, kOneBit},
    {"optimizer.params.comm_backend_name", kRefuse, kOneBit},
    {"optimizer.params.var_freeze_step", kRefuse, kOneBit},
    {"optimizer.params.var_update_scaler", kRefuse, kOneBit},
    {"optimizer.params.local_step_scaler", kRefuse, kOneBit},
    {"optimizer.params.local_step_clipper", kRefuse, kOneBit},
    {"optimizer.params.max_coeff", kRefuse, kOneBit},
    {"optimizer.params.min_coeff", kRefuse, kOneBit},
    {"optimizer.params.coeff_beta", kRefuse, kOneBit},
    {"optimizer.params.factor_max", kRefuse, kOneBit},
    {"optimizer.params.factor_min", kRefuse, kOneBit},
    {"optimizer.params.factor_threshold", kRefuse, kOneBit},
    {"optimizer.legacy_fusion", kNone, "a choice of CUDA kernel"},
    // Scheduler (deepspeed/runtime/lr_schedules.py).
    {"scheduler.type", kImpl,
     "WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle with DeepSpeed's formulas "
     "(optim/deepspeed_lr_schedule.h) instead of the --lr-* schedule; LRRangeTest is refused"},
    {"scheduler.params.warmup_min_lr",
     kImpl,
     "WarmupLR/WarmupDecayLR start",
     {},
     "0 (as Hugging Face: not a trainer argument)"},
    {"scheduler.params.warmup_max_lr", kImpl, "WarmupLR/WarmupDecayLR peak (and --lr)", {}, "--lr"},
    {"scheduler.params.warmup_num_steps",
     kImpl,
     "warmup updates",
     {},
     "--lr-warmup-iters, else ceil(--lr-warmup-fraction x total_num_steps), else 0"},
    {"scheduler.params.warmup_type", kImpl, "\"log\" (default) or \"linear\" warmup"},
    {"scheduler.params.total_num_steps",
     kImpl,
     "WarmupDecayLR/WarmupCosineLR length",
     {},
     "--lr-decay-iters, else --train-iters"},
    {"scheduler.params.warmup_min_ratio", kImpl, "WarmupCosineLR start, a fraction of lr"},
    {"scheduler.params.cos_min_ratio", kImpl, "WarmupCosineLR floor, a fraction of lr"},
    {"scheduler.params.cycle_min_lr", kImpl, "OneCycle (required)"},
    {"scheduler.params.cycle_max_lr", kImpl, "OneCycle (required)"},
    {"scheduler.params.decay_lr_rate", kImpl, "OneCycle post-cycle decay (0: none)"},
    {"scheduler.params.cycle_first_step_size", kImpl, "OneCycle rising half (2000)"},
    {"scheduler.params.cycle_second_step_size", kImpl, "OneCycle falling half (the first's)"},
    {"scheduler.params.cycle_first_stair_count", kNone,
     "DeepSpeed's OneCycle stores it but its formulas never read it"},
    {"scheduler.params.cycle_second_stair_count", kNone,
     "DeepSpeed's OneCycle stores it but its formulas never read it"},
    {"scheduler.params.decay_step_size", kImpl, "OneCycle decay interval (0: no decay)"},
    {"scheduler.params.cycle_momentum", kImpl,
     "OneCycle cycles Adam's beta1 (and sets beta2 to 0.99, as DeepSpeed); with SGD DeepSpeed "
     "turns it off (SGD has no betas) and so does Tessera, with a warning"},
    {"scheduler.params.cycle_min_mom", kImpl, "OneCycle (0.8)"},
    {"scheduler.params.cycle_max_mom", kImpl, "OneCycle (0.9)"},
    {"scheduler.params.decay_mom_rate", kImpl, "OneCycle post-cycle momentum growth (0: none)"},
    {"scheduler.params.last_batch_iteration", kRefuse,
     "resuming sets the schedule's position from the checkpoint's step count", "-1"},
    {"scheduler.params.lr_range_test_min_lr", kRefuse, kLrRange},
    {"scheduler.params.lr_range_test_step_size", kRefuse, kLrRange},
    {"scheduler.params.lr_range_test_step_rate", kRefuse, kLrRange},
    {"scheduler.params.lr_range_test_staircase", kRefuse, kLrRange},
    // Communication.
    {"communication_data_type", kImpl,
     "the gradients' data-parallel reductions send and sum in this type: \"bf16\" or \"fp16\" "
     "halve the bytes, every partial sum rounded to it, as Megatron's --grad-reduce-in-bf16 "
     "(accumulation stays fp32). Absent, DeepSpeed reduces in the model's 16-bit type under "
     "fp16/bf16, Tessera in fp32 (exact sums, so layouts reproduce one process): give the key to "
     "match DeepSpeed"},
    {"prescale_gradients", kNone,
     "Tessera differentiates the loss already divided by the global batch's token count and sums "
     "gradients over DP, so the average is formed before the reduction either way; "
     "DeepSpeed's orders of scaling give the same fp32 values up to rounding (bitwise when the "
     "factors are powers of two)"},
    {"gradient_predivide_factor", kNone,
     "as prescale_gradients: the division by DP happens before Tessera's reduction; moving "
     "part of it after the sum changes only the rounding (must be > 0)"},
    {"sparse_gradients", kNone,
     "sparse embedding gradients change the message format only; Tessera's are dense"},
    {"fp32_allreduce", kNone,
     "Tessera's gradients are fp32, so their reduction is fp32 either way"},
    // fp16 / bf16 / amp.
    {"fp16.enabled", kImpl, "--fp16", {}, "--fp16"},
    {"fp16.auto_cast", kNone,
     "Tessera's inputs are token ids; the model computes in fp16 when fp16 is enabled"},
    {"fp16.loss_scale", kImpl, "--loss-scale (0: dynamic)"},
    {"fp16.initial_scale_power", kImpl, "--initial-loss-scale 2^power (16)"},
    {"fp16.loss_scale_window", kImpl, "--loss-scale-window (1000)"},
    {"fp16.hysteresis", kImpl, "--hysteresis (2)"},
    {"fp16.consecutive_hysteresis", kRefuse,
     "refilling the hysteresis on every clean step has no tessera-train flag yet", "false"},
    {"fp16.min_loss_scale", kImpl, "--min-loss-scale (1)"},
    {"bf16.enabled", kImpl, "--bf16", {}, "--bf16"},
    {"bfloat16.enabled",
     kImpl,
     "--bf16 (the legacy spelling DeepSpeed accepts for bf16)",
     {},
     "--bf16"},
    {"amp.enabled", kRefuse, "NVIDIA Apex AMP does not exist on this backend; use fp16 or bf16",
     "false", "false (Tessera has no Apex)"},
    {"amp.*", kNone, "options passed to Apex's amp.initialize; AMP itself is refused"},
    {"gradient_clipping", kImpl, "--clip-grad (DeepSpeed's default 0.0: off)", {}, "--clip-grad"},
    // ZeRO.
    {"zero_optimization.stage", kImpl, "--zero-stage"},
    {"zero_optimization.allgather_partitions", kNone,
     "all-gather or broadcasts: the same whole parameters either way; Tessera all-gathers"},
    {"zero_optimization.allgather_bucket_size", kImpl,
     "stages 1-2: must equal the reduce bucket (Tessera all-gathers per gradient bucket), "
     "anything else is refused; stages 0 and 3 have no such bucket and accept it"},
    {"zero_optimization.overlap_comm", kImpl,
     "--overlap-grad-reduce (DeepSpeed's code default: on for stage 3 only)"},
    {"zero_optimization.reduce_scatter", kNone,
     "reduce-scatter or all-reduce: the same averaged gradients; Tessera's ZeRO stages "
     "reduce-scatter, stage 0 all-reduces"},
    {"zero_optimization.reduce_bucket_size",
     kImpl,
     "--ddp-bucket-size (elements)",
     {},
     "hidden x hidden (the model's --hidden-size)"},
    {"zero_optimization.contiguous_gradients", kImpl,
     "true: Tessera's gradients are always one contiguous buffer; false is refused"},
    {"zero_optimization.grad_hooks", kNone,
     "Tessera reduces buckets from backward hooks whenever overlap_comm is on"},
    {"zero_optimization.round_robin_gradients", kNone,
     "orders gradient copies to CPU under offload, which is not used"},
    {"zero_optimization.offload_param.device", kImpl,
     "--offload-param-nvme-path (\"nvme\", ZeRO 3); \"cpu\" is host memory, where the "
     "parameters are anyway (logged)"},
    {"zero_optimization.offload_param.nvme_path", kImpl, "--offload-param-nvme-path"},
    {"zero_optimization.offload_param.buffer_count", kImpl, "buffers of the parameter swap (5)"},
    {"zero_optimization.offload_param.buffer_size", kImpl,
     "elements per parameter swap buffer (1e8)"},
    {"zero_optimization.offload_param.max_in_cpu", kImpl, "--offload-param-max-in-cpu (1e9)"},
    {"zero_optimization.offload_param.pin_memory", kNone,
     "page-locking host buffers speeds GPU copies; there are none"},
    {"zero_optimization.offload_param.*", kNone, kOffloadRest},
    {"zero_optimization.offload_optimizer.device", kImpl,
     "--offload-optimizer-nvme-path (\"nvme\", ZeRO 1-3); \"cpu\" is host memory, where the "
     "state is anyway (logged, as --optimizer-cpu-offload)"},
    {"zero_optimization.offload_optimizer.nvme_path", kImpl, "--offload-optimizer-nvme-path"},
    {"zero_optimization.offload_optimizer.buffer_count", kImpl,
     "--offload-buffer-count (4): buffers of one sub-group each"},
    {"zero_optimization.offload_optimizer.pipeline_read", kImpl,
     "read the next sub-group while one is updated (--offload-pipeline)"},
    {"zero_optimization.offload_optimizer.pipeline_write", kImpl,
     "write the last sub-group while one is updated (--offload-pipeline)"},
    {"zero_optimization.offload_optimizer.fast_init", kImpl,
     "--offload-fast-init: the initial state is made when first needed, not written"},
    {"zero_optimization.offload_optimizer.pin_memory", kNone,
     "page-locking host buffers speeds GPU copies; there are none"},
    {"zero_optimization.offload_optimizer.*", kNone, kOffloadRest},
    {"zero_optimization.stage3_max_live_parameters", kImpl, "--stage3-max-live-parameters (1e9)"},
    {"zero_optimization.stage3_max_reuse_distance", kNone,
     "keeping a gathered unit for a later reuse is not implemented; it trades memory for "
     "communication and does not change the values"},
    {"zero_optimization.stage3_prefetch_bucket_size",
     kImpl,
     "--stage3-prefetch-bucket-size (5e7)",
     {},
     "int(0.9 x hidden x hidden)"},
    {"zero_optimization.stage3_param_persistence_threshold",
     kImpl,
     "--stage3-param-persistence-threshold (1e5)",
     {},
     "10 x hidden"},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", kNone,
     "Tessera's checkpoints and --export-weights always hold whole parameters"},
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save", kNone,
     "Tessera's checkpoints and --export-weights always hold whole parameters"},
    {"zero_optimization.sub_group_size", kImpl,
     "--offload-sub-group-size (1e9): the swap unit of optimizer state on NVMe; in memory the "
     "optimizer steps the owned elements in one pass (the values are the same)"},
    {"zero_optimization.elastic_checkpoint", kNone,
     "any checkpoint loads under any layout (checkpoints.md)"},
    {"zero_optimization.ignore_unused_parameters", kNone, "every parameter is used"},
    {"zero_optimization.zero_hpz_partition_size", kRefuse,
     "ZeRO++ hierarchical partitioning is not implemented", "1"},
    {"zero_optimization.zero_quantized_weights", kRefuse,
     "ZeRO++ quantized weights are not implemented (they change the values)", "false"},
    {"zero_optimization.zero_quantized_gradients", kRefuse,
     "ZeRO++ quantized gradients are not implemented (they change the values)", "false"},
    {"zero_optimization.cpu_offload", kNone,
     "the deprecated spelling of offload_optimizer device \"cpu\": host memory, where the "
     "state is anyway"},
    // Asynchronous I/O (NVMe offload; io/async_io.h).
    {"aio.block_size", kImpl, "--aio-block-size (1 MiB)"},
    {"aio.queue_depth", kImpl, "--aio-queue-depth (8)"},
    {"aio.intra_op_parallelism", kImpl, "--aio-intra-op-parallelism (1)"},
    {"aio.thread_count", kImpl, "the older spelling of intra_op_parallelism"},
    {"aio.single_submit", kImpl, "submit requests one at a time (false)"},
    {"aio.overlap_events", kImpl, "keep submitting while earlier requests complete (true)"},
    {"aio.use_gds", kImpl, "false only: GPUDirect Storage needs a GPU"},
    {"aio.*", kNone, "not a setting of Tessera's swap I/O"},
    // Logging.
    {"steps_per_print", kImpl, "--log-interval (10)"},
    {"wall_clock_breakdown", kImpl, "true: --timing-log-level 1 (time per phase)"},
    {"dump_state", kNone, "prints DeepSpeed's engine state; --list-flags shows Tessera's options"},
    {"memory_breakdown", kNone, "the start-of-run memory report covers it (memory_report.h)"},
    // Autotuning, flops profiler.
    {"autotuning.*", kNone, "configures the deepspeed launcher's autotuner, which is not used"},
    {"flops_profiler.*", kNone,
     "a per-module profile; the log line reports TFLOP/s per rank (flops.h)"},
    // Activation checkpointing (deepspeed/runtime/activation_checkpointing/config.py).
    {"activation_checkpointing", kImpl,
     "the block configures the checkpointing the model code calls; Tessera's model calls it on "
     "every layer: the block turns on --recompute-granularity full --recompute-method uniform "
     "(unless the flags chose a recompute)"},
    {"activation_checkpointing.number_checkpoints", kImpl,
     "N checkpoints per rank: --recompute-num-layers ceil(layers per pipeline rank / N) (1 when "
     "not given: every layer keeps only its input)"},
    {"activation_checkpointing.partition_activations", kNone,
     "splitting saved inputs over TP saves memory only; under --sequence-parallel they are split "
     "already"},
    {"activation_checkpointing.contiguous_memory_optimization", kNone,
     "a GPU memory-fragmentation remedy; the values are the same"},
    {"activation_checkpointing.cpu_checkpointing", kNone, "activations are in host memory already"},
    {"activation_checkpointing.synchronize_checkpoint_boundary", kNone,
     "a device synchronize; CPU kernels are synchronous"},
    {"activation_checkpointing.profile", kNone,
     "--timing-log-level 1 reports forward (with recompute) and backward times"},
    // Sparse attention, data efficiency, curriculum learning.
    {"sparse_attention.*", kRefuse,
     "Tessera's attention is dense (causal); block-sparse layouts "
     "are not implemented"},
    {"data_efficiency.enabled", kRefuse,
     "curriculum sampling and random layerwise token dropping are not implemented", "false"},
    {"data_efficiency.*", kNone, "configures data efficiency, which is refused when enabled"},
    {"curriculum_learning.enabled", kRefuse, "curriculum learning is not implemented", "false"},
    {"curriculum_learning.*", kNone,
     "configures curriculum learning, which is refused when enabled"},
    // Monitoring.
    {"tensorboard.enabled", kImpl, "--tensorboard-dir output_path/job_name"},
    {"tensorboard.output_path", kImpl, "--tensorboard-dir output_path/job_name"},
    {"tensorboard.job_name", kImpl, "--tensorboard-dir output_path/job_name (DeepSpeedJobName)"},
    {"wandb.*", kNone, "no network: Weights & Biases logging is not available (use tensorboard)"},
    {"csv_monitor.*", kNone, "CSV monitor files are not written; --metrics-file writes JSON lines"},
    {"comms_logger.*", kNone,
     "per-collective logging: --check-collectives and the flight recorder cover it"},
    // Elasticity.
    {"elasticity.enabled", kRefuse,
     "elastic batch sizes (chosen from the GPU count) are not implemented", "false"},
    {"elasticity.*", kNone, "configures elasticity, which is refused when enabled"},
    // Compression.
    {"compression_training.*", kRefuse,
     "DeepSpeed Compression (layer reduction, quantization, pruning) is not implemented"},
    // Checkpoints.
    {"checkpoint.tag_validation", kNone, "Tessera's checkpoints carry no tags to compare"},
    {"checkpoint.load_universal", kNone, "any checkpoint loads under any layout already"},
    {"checkpoint.use_node_local_storage", kRefuse,
     "checkpoints must be on a file system all ranks see", "false"},
    {"checkpoint.parallel_write.pipeline_stage", kNone, "every rank writes its own file already"},
    // Data types.
    {"data_types.grad_accum_dtype", kImpl,
     "\"fp32\": what Tessera does (gradients accumulate in fp32 whatever the compute dtype); "
     "\"fp16\"/\"bf16\" are refused"},
    // Keys deepspeed/runtime/config.py reads that the page does not document.
    {"zero_allow_untested_optimizer", kNone, "Tessera's ZeRO works with each of its optimizers"},
    {"zero_force_ds_cpu_optimizer", kNone, "there is no CPU-offload optimizer to choose"},
    {"disable_allgather", kNone,
     "broadcasts instead of all-gathers give the same whole parameters"},
    {"vocabulary_size", kNone, "DeepSpeed itself does not use it; the model's --vocab-size rules"},
};

bool is_wildcard(std::string_view path) { return path.size() >= 2 && path.ends_with(".*"); }

std::string value_text(const nlohmann::json& v) { return v.dump(); }

// Walks one object; `prefix` is its dotted path ("" at the top).
void classify(const nlohmann::json& object, const std::string& prefix, const std::string& file,
              std::set<std::string_view>& warned, std::vector<std::string>& warnings) {
  for (const auto& [key, value] : object.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.is_null()) continue;  // DeepSpeed reads null as "not given"
    const DeepSpeedKey* row = find_deepspeed_key(path);
    const bool exact = row != nullptr && row->path == path;
    if (row == nullptr || (!exact && !is_wildcard(row->path))) {
      if (value.is_object() && deepspeed_block_has_rows(path)) {
        classify(value, path, file, warned, warnings);
        continue;
      }
      throw Error(file + ": unknown key '" + path +
                  "' (not a DeepSpeed key Tessera knows: tessera-train --print-deepspeed-keys "
                  "lists them)");
    }
    switch (row->kind) {
      case K::kImplemented:
        break;
      case K::kNoEffect:
        if (warned.insert(row->path).second) {
          // A block's row names the block ("flops_profiler"), an exact row its key.
          const std::string_view name =
              exact ? row->path : row->path.substr(0, row->path.size() - 2);
          warnings.push_back(file + ": " + std::string(name) +
                             " has no effect on this backend: " + std::string(row->reason));
        }
        break;
      case K::kRefused:
        if (!row->inert.empty() && value == nlohmann::json::parse(row->inert)) break;
        throw Error(file + ": " + path + " " + value_text(value) +
                    " is not supported: " + std::string(row->reason) +
                    (row->inert.empty() ? "" : " (only " + std::string(row->inert) + ")"));
    }
    if (exact && value.is_object()) classify(value, path, file, warned, warnings);
  }
}

}  // namespace

const char* deepspeed_key_class_name(DeepSpeedKeyClass c) {
  switch (c) {
    case K::kImplemented:
      return "implemented";
    case K::kNoEffect:
      return "no effect";
    case K::kRefused:
      return "refused";
  }
  return "?";
}

const std::vector<DeepSpeedKey>& deepspeed_key_table() { return kTable; }

const DeepSpeedKey* find_deepspeed_key(std::string_view path) {
  const DeepSpeedKey* best = nullptr;
  for (const DeepSpeedKey& row : kTable) {
    if (row.path == path) return &row;
    if (!is_wildcard(row.path)) continue;
    const std::string_view block = row.path.substr(0, row.path.size() - 1);  // "amp."
    if (path.starts_with(block) && (best == nullptr || row.path.size() > best->path.size()))
      best = &row;
  }
  return best;
}

bool deepspeed_block_has_rows(std::string_view path) {
  return std::any_of(kTable.begin(), kTable.end(), [&](const DeepSpeedKey& row) {
    return row.path.size() > path.size() + 1 && row.path.starts_with(path) &&
           row.path[path.size()] == '.';
  });
}

DeepSpeedKeyCounts deepspeed_key_counts() {
  DeepSpeedKeyCounts c;
  for (const DeepSpeedKey& row : kTable) {
    if (row.kind == K::kImplemented) ++c.implemented;
    if (row.kind == K::kNoEffect) ++c.no_effect;
    if (row.kind == K::kRefused) ++c.refused;
  }
  return c;
}

std::string deepspeed_key_markdown() {
  std::ostringstream out;
  const DeepSpeedKeyCounts c = deepspeed_key_counts();
  out << "DeepSpeed config keys: " << kTable.size() << " rows, " << c.implemented
      << " implemented, " << c.no_effect << " no effect, " << c.refused << " refused\n\n";
  out << "| key | class | \"auto\" from | what it becomes / why |\n| --- | --- | --- | --- |\n";
  for (const DeepSpeedKey& row : kTable) {
    std::string reason(row.reason);
    if (!row.inert.empty()) reason += " (accepted: " + std::string(row.inert) + ")";
    std::replace(reason.begin(), reason.end(), '|', '/');
    out << "| `" << row.path << "` | " << deepspeed_key_class_name(row.kind) << " | "
        << (row.auto_from.empty() ? "" : std::string(row.auto_from)) << " | " << reason << " |\n";
  }
  return out.str();
}

std::vector<std::string> classify_deepspeed_keys(const nlohmann::json& config,
                                                 const std::string& file) {
  if (!config.is_object()) throw Error(file + ": the file must hold a JSON object");
  std::set<std::string_view> warned;
  std::vector<std::string> warnings;
  classify(config, "", file, warned, warnings);
  return warnings;
}

}  // namespace tessera::train
