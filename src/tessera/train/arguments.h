// tessera-train's arguments: Megatron-LM's flag names and defaults (REFERENCE.md §4), the
// model presets (`--model NAME`, overridable by any explicit flag) and `--config FILE.json`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/data/tokenizer.h"
#include "tessera/model/config.h"
#include "tessera/optim/deepspeed_lr_schedule.h"
#include "tessera/train/batch_schedule.h"

namespace tessera::train {

// How tessera-train honours a flag (docs/migration.md): with its meaning (Megatron's where the
// flag is Megatron's), accepted and logged once at start because it configures something this
// backend does not have (GPU kernels, fusions, external services), or refused with one line
// naming the missing feature. Flags outside the table are errors.
enum class FlagEffect { kImplemented, kNoEffect, kRefused };

// A given flag of the no-effect or refused kind, with why (FlagTable::accepted).
struct AcceptedFlag {
  std::string name;
  FlagEffect effect;
  std::string reason;
};

struct TrainArgs {
  model::ModelConfig model;
  std::string model_preset;  // --model
  // Megatron model flags checked against what they restate (megatron_flags.cc): --kv-channels
  // (the head size: hidden / heads), --rotary-percent (1.0: every dimension rotates),
  // --no-position-embedding (no learned position table: rope), --apply-layernorm-1p.
  int kv_channels = 0;
  double rotary_percent = 1.0;
  bool no_position_embedding = false;
  bool apply_layernorm_1p = false;

  // Batches and length of training.
  int64_t micro_batch_size = 1;      // --micro-batch-size
  int64_t global_batch_size = 0;     // --global-batch-size (0: micro batch x data parallel)
  int64_t train_iters = 0;           // --train-iters
  int64_t train_samples = 0;         // --train-samples (alternative to --train-iters)
  int64_t exit_interval = 0;         // --exit-interval
  double exit_duration_in_mins = 0;  // --exit-duration-in-mins
  bool exit_signal_handler = false;  // --exit-signal-handler: SIGTERM saves and exits
  int64_t eval_interval = 1000;      // --eval-interval
  int64_t eval_iters = 100;          // --eval-iters
  // The global batch size as a function of consumed samples (train/batch_schedule.h): Megatron's
  // --rampup-batch-size START INCREMENT SAMPLES and --step-batch-size-schedule "T0:B0 T1:B1 ...".
  std::vector<int64_t> rampup_batch_size;
  std::string step_batch_size_schedule;

  // Optimizer and schedule.
  std::string optimizer = "adam";  // --optimizer {adam, sgd}; adam is AdamW (decoupled decay)
  double lr = -1;                  // --lr (required; negative = not given)
  double min_lr = 0;               // --min-lr
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_eps = 1e-8;
  double sgd_momentum = 0.9;       // --sgd-momentum
  double weight_decay = 0.01;      // --weight-decay
  double clip_grad = 1.0;          // --clip-grad (0 disables)
  int64_t lr_warmup_iters = 0;     // --lr-warmup-iters
  double lr_warmup_fraction = -1;  // --lr-warmup-fraction (of the decay iterations)
  int64_t lr_decay_iters = 0;      // --lr-decay-iters (0: the training iterations)
  std::string lr_decay_style = "linear";
  int64_t lr_wsd_decay_iters = 0;  // --lr-wsd-decay-iters
  std::string lr_wsd_decay_style = "exponential";
  // The schedule in samples (Megatron's sample-based training): set any of these and the
  // schedule advances by the samples of each applied update.
  int64_t lr_warmup_samples = 0;     // --lr-warmup-samples
  int64_t lr_decay_samples = 0;      // --lr-decay-samples (0: the training samples)
  int64_t lr_wsd_decay_samples = 0;  // --lr-wsd-decay-samples
  // Megatron's --decoupled-lr / --decoupled-min-lr: the input embedding and the output layer
  // follow the same schedule between these (negative: not given).
  double decoupled_lr = -1, decoupled_min_lr = -1;

  // Precision.
  bool bf16 = false, fp16 = false;
  double loss_scale = 0;                     // --loss-scale (> 0: static)
  double initial_loss_scale = 4294967296.0;  // 2^32, Megatron's default
  double min_loss_scale = 1.0;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool skip_nan_iterations = false;  // --skip-nan-iterations

  // Data.
  bool mock_data = false;              // --mock-data
  std::vector<std::string> data_path;  // --data-path PREFIX... or W1 PREFIX1 W2 PREFIX2...
  std::vector<std::string> train_data_path, valid_data_path, test_data_path;  // per split
  std::string data_cache_path;  // --data-cache-path (default: PREFIX/cache/...)
  std::string tokenizer_type;   // --tokenizer-type (data/tokenizer.h: tokenizer_types())
  std::string vocab_file;       // --vocab-file (GPT2BPETokenizer: encoder.json)
  std::string merge_file;       // --merge-file (GPT2BPETokenizer: vocab.bpe)
  std::string tokenizer_model;  // --tokenizer-model (tokenizer.json or SentencePiece .model)
  std::string tiktoken_pattern;                      // --tiktoken-pattern (TikTokenizer: v1 | v2)
  int64_t tiktoken_num_special_tokens = 1000;        // --tiktoken-num-special-tokens
  std::vector<std::string> tiktoken_special_tokens;  // --tiktoken-special-tokens
  // The tokenizer's end-of-document id, recorded by resolve_argument_files when it loads the
  // tokenizer (for the vocabulary size) so that the trainer does not load it a second time. Unset
  // without a tokenizer, for a tokenizer that has no EOD, and in TrainArgs filled in by hand
  // (tests): the trainer then loads the tokenizer itself (and reports a missing EOD). Not a flag.
  std::optional<int32_t> tokenizer_eod;
  std::string split = "969,30,1";     // --split (train, valid, test weights)
  bool eod_mask_loss = false;         // --eod-mask-loss
  bool reset_position_ids = false;    // --reset-position-ids
  bool reset_attention_mask = false;  // --reset-attention-mask
  std::string data_args_path;         // --data-args-path FILE: the --data-path list, in a file

  // Process mesh. Training runs tensor (+ sequence), pipeline and data parallel
  // (DP = world / (TP x PP)); context and expert sizes are validated and printed by
  // --print-mesh, and arrive with their features.
  int tensor_model_parallel_size = 1;    // --tensor-model-parallel-size
  bool sequence_parallel = false;        // --sequence-parallel (off with a warning at TP 1)
  bool tp_reduce_in_16_bit = false;      // --tp-reduce-in-16-bit (parallel/mappings.h)
  int pipeline_model_parallel_size = 1;  // --pipeline-model-parallel-size
  // Pipeline schedule and layer split (pipeline/schedule.h, pipeline/partition.h).
  std::string pipeline_schedule;               // --pipeline-schedule (default 1f1b, or interleaved)
  int num_layers_per_virtual_stage = 0;        // --num-layers-per-virtual-pipeline-stage (0: none)
  int decoder_first_pipeline_num_layers = -1;  // --decoder-first-pipeline-num-layers
  int decoder_last_pipeline_num_layers = -1;   // --decoder-last-pipeline-num-layers
  std::string timeline_file;                   // --timeline-file F.json (Chrome trace)
  int64_t timeline_iteration = 0;              // --timeline-iteration (0: the last)
  // Megatron's --profile: the timeline of the iterations after --profile-step-start completed
  // ones up to --profile-step-end completed (Megatron's steps [start, end)).
  bool profile = false;
  int64_t profile_step_start = 10, profile_step_end = 12;
  // Activation recomputation (model/chunk_runner.h RecomputePolicy).
  std::string recompute_granularity;                // --recompute-granularity full|selective
  std::string recompute_method;                     // --recompute-method uniform|block
  int recompute_num_layers = 0;                     // --recompute-num-layers
  bool recompute_activations = false;  // --recompute-activations: granularity selective
  int context_parallel_size = 1;                    // --context-parallel-size
  std::vector<std::string> cp_comm_type = {"p2p"};  // --cp-comm-type (one, or one per layer)
  std::vector<int> hierarchical_cp_sizes;           // --hierarchical-context-parallel-sizes
  int ds_sequence_parallel_size = 1;    // --ds-sequence-parallel-size (Ulysses: CP with a2a)
  int expert_model_parallel_size = 1;   // --expert-model-parallel-size
  int expert_tensor_parallel_size = 0;  // --expert-tensor-parallel-size (0: = TP)
  bool print_mesh = false;              // --print-mesh: print the layout and exit

  // Data parallel and ZeRO.
  int zero_stage = 0;                      // --zero-stage (--use-distributed-optimizer means 1)
  bool use_distributed_optimizer = false;  // --use-distributed-optimizer
  bool overlap_grad_reduce = true;         // --overlap-grad-reduce / --no-overlap-grad-reduce
  int64_t ddp_bucket_size = 0;             // --ddp-bucket-size elements (0: max(40M, 1M x DP))
  // The type the gradients' data-parallel reductions send and sum in: Megatron's
  // --grad-reduce-in-bf16, or DeepSpeed's communication_data_type (kF32, kBF16, kF16).
  bool grad_reduce_in_bf16 = false;
  DType communication_data_type = DType::kF32;
  // ZeRO 3 (DeepSpeed's zero_optimization keys and defaults).
  int64_t stage3_prefetch_bucket_size = 50'000'000;      // elements
  int64_t stage3_param_persistence_threshold = 100'000;  // elements
  int64_t stage3_max_live_parameters = 1'000'000'000;    // elements
  // ZeRO-Offload / ZeRO-Infinity (offload/; docs/offload.md): DeepSpeed's offload_optimizer,
  // offload_param, sub_group_size and aio keys, with DeepSpeed's defaults.
  std::string offload_optimizer_device = "none";  // none | cpu (in memory) | nvme
  std::string offload_optimizer_nvme_path;        // --offload-optimizer-nvme-path (device nvme)
  int offload_optimizer_buffer_count = 4;         // --offload-buffer-count
  bool offload_pipeline_read = false, offload_pipeline_write = false;
  bool offload_pipeline = false;                     // --offload-pipeline: both of the above
  bool optimizer_cpu_offload = false;                // Megatron's --optimizer-cpu-offload
  bool offload_fast_init = false;                    // --offload-fast-init
  double optimizer_offload_fraction = 1.0;           // Megatron's --optimizer-offload-fraction
  std::string offload_param_device = "none";         // none | cpu | nvme (ZeRO 3)
  std::string offload_param_nvme_path;               // --offload-param-nvme-path (device nvme)
  int offload_param_buffer_count = 5;                // offload_param.buffer_count
  int64_t offload_param_buffer_size = 100'000'000;   // offload_param.buffer_size (elements)
  int64_t offload_param_max_in_cpu = 1'000'000'000;  // offload_param.max_in_cpu (elements)
  int64_t offload_sub_group_size = 1'000'000'000;    // --offload-sub-group-size (elements)
  int64_t aio_block_size = 1 << 20;                  // --aio-block-size (bytes)
  int aio_queue_depth = 8;                           // --aio-queue-depth
  int aio_intra_op_parallelism = 1;                  // --aio-intra-op-parallelism
  bool aio_single_submit = false, aio_overlap_events = true;
  std::string aio_backend = "auto";                      // --aio-backend auto|io_uring|threads
  double distributed_timeout_minutes = 10;               // --distributed-timeout-minutes (watchdog)
  bool check_collectives = false;                        // --check-collectives
  std::string flight_recorder_dir;  // --flight-recorder-dir (empty: TESSERA_FLIGHT_RECORDER_DIR)
  int64_t flight_recorder_size = 2000;  // --flight-recorder-size

  // Run, output.
  uint64_t seed = 1234;        // --seed
  // Megatron's --deterministic-mode and --calculate-per-token-loss: what Tessera always does
  // (accepted as implemented; docs/migration.md).
  bool deterministic_mode = false, calculate_per_token_loss = false;
  int64_t log_interval = 100;  // --log-interval
  int timing_log_level = 0;    // --timing-log-level: 1 phase breakdown, 2 + min/max over ranks
  bool moe_per_layer_logging = false;  // --moe-per-layer-logging
  std::string metrics_file;            // --metrics-file
  // TensorBoard (train/tensorboard_log.h), Megatron's flags.
  std::string tensorboard_dir;                // --tensorboard-dir (empty: none)
  int64_t tensorboard_log_interval = 1;       // --tensorboard-log-interval
  int tensorboard_queue_size = 1000;          // --tensorboard-queue-size
  bool log_validation_ppl_to_tensorboard = false;
  bool log_timers_to_tensorboard = false;
  bool log_memory_to_tensorboard = false;
  bool log_throughput = false;
  bool log_world_size_to_tensorboard = false;
  bool log_params_norm = false;        // --log-params-norm: the master weights' L2 norm
  bool log_num_zeros_in_grad = false;  // --log-num-zeros-in-grad: the gradient's exact zeros
  bool log_straggler = false;  // --log-straggler: per-rank min/max of the times, slowest named
  std::string export_weights;          // --export-weights F.safetensors
  int num_threads = 0;                 // --num-threads (0: cores / local ranks)

  // Checkpoints (checkpoint/sharded_checkpoint.h).
  std::string save;                  // --save DIR
  int64_t save_interval = 0;         // --save-interval (0: only at the end)
  bool async_save = false;           // --async-save
  int keep_checkpoints = 0;          // --keep-checkpoints (0: all)
  bool no_save_optim = false;        // --no-save-optim
  std::string load;                  // --load DIR (a checkpoint or a Hugging Face model)
  bool finetune = false;             // --finetune
  bool no_load_optim = false;        // --no-load-optim
  bool no_load_rng = false;          // --no-load-rng
  bool exit_on_missing_checkpoint = false;    // --exit-on-missing-checkpoint
  bool override_opt_param_scheduler = false;  // what a resumed run always does (migration.md)
  std::string pretrained_checkpoint;  // --pretrained-checkpoint DIR (finetune from it)
  int64_t kill_during_save_at = -1;  // --kill-during-save-at-iteration (test hook)
  int64_t inject_overflow_at = -1;   // --inject-overflow-at-iteration (test hook)
  int inject_slow_rank = -1;         // --inject-slow-rank (test hook: a planted straggler)
  double inject_slow_forward_ms = 0;  // --inject-slow-forward-ms
  std::string dump_numerics;        // --dump-numerics DIR (numerics/numerics_dump.h)
  int inject_grad_ulp_layer = -1;   // --inject-grad-ulp-layer (test hook for the diff)
  int inject_stop_rank = -1;           // --inject-stop-rank (test hook: a rank that stops)
  int inject_crash_rank = -1;          // --inject-crash-rank (test hook: a rank that crashes)
  int64_t inject_kill_in_optimizer_step = -1;  // --inject-kill-in-optimizer-step (test hook)
  int64_t inject_fault_iteration = 1;  // --inject-fault-iteration: when they do

  // DeepSpeed configuration (train/deepspeed_config.h), applied once DP is known.
  bool deepspeed = false;        // --deepspeed
  std::string deepspeed_config;  // --deepspeed_config FILE (or --deepspeed-config)
  std::optional<optim::DeepSpeedScheduleOptions> deepspeed_schedule;  // its "scheduler"

  // Megatron flags given that Tessera accepts without effect (or refuses): logged at start.
  std::vector<AcceptedFlag> accepted_flags_given;
  // One line each, printed once at start on rank 0 ("note: ..."): flags given that change nothing
  // here, and Megatron aliases resolved.
  std::vector<std::string> notices;

  // The fields a flag set, on the command line or in --config (FlagTable::record_given), as
  // byte offsets within this struct. Ask by field, not by a flag's spelling:
  // given(&TrainArgs::zero_stage), given(&model::ModelConfig::hidden_size). A DeepSpeed config
  // uses this to tell a default from a choice it must not contradict.
  std::set<std::ptrdiff_t> given_fields;
  template <typename T>
  bool given(T TrainArgs::*field) const {
    // A struct's offset is its first member's: ask for the member (given(&ModelConfig::x)).
    static_assert(!std::is_same_v<T, model::ModelConfig>, "ask for a ModelConfig field");
    return given_fields.count(offset_of(&(this->*field))) > 0;
  }
  template <typename T>
  bool given(T model::ModelConfig::*field) const {
    return given_fields.count(offset_of(&(model.*field))) > 0;
  }
  std::ptrdiff_t offset_of(const void* member) const {
    return static_cast<const char*>(member) - reinterpret_cast<const char*>(this);
  }

  int64_t num_microbatches(int64_t data_parallel) const;
};

// Parses argv into `args`: flags and --config only, no other file is read. args.model becomes
// the --model preset with the given model flags laid over it (without --model: args.model as
// passed in, usually the defaults, with the given flags set). Returns false when the run should
// stop successfully (--help, --version, --list-flags or --print-deepspeed-keys printed). Throws
// tessera::Error with one line (naming the flag or config key) on any bad input.
bool parse_arguments(int argc, const char* const* argv, TrainArgs& args);

// What the flags name on disk and the arguments depend on (argument_files.cc): with --load of a
// Hugging Face directory and no --model, its config.json becomes the model (given model flags
// still win) and its tokenizer.json the tokenizer unless one is named; a named tokenizer is
// loaded once, to set the vocabulary size (unless --vocab-size was given) and record its EOD id.
// Throws tessera::Error for an unreadable or malformed file.
void resolve_argument_files(TrainArgs& args);

// Lays the model flags given in `args` over `base` (a preset or a Hugging Face config): every
// given model field takes its value from args.model.
void copy_given_model_flags(const TrainArgs& args, model::ModelConfig& base);

// The flag that sets `field`, e.g. flag_name(&TrainArgs::zero_stage) is "--zero-stage": for
// messages, so they follow a renamed flag.
std::string flag_name_at(std::ptrdiff_t offset);
template <typename T>
std::string flag_name(T TrainArgs::*field) {
  static const TrainArgs probe;
  return flag_name_at(probe.offset_of(&(probe.*field)));
}

// Every flag, by group, with its default and help: the text of `tessera-train --list-flags`
// (one Markdown table).
std::string flag_list();
// The same rows, for generated documentation.
struct FlagInfo;
const std::vector<FlagInfo>& flag_rows();
// docs/migration.md's generated part (`tessera-train --migration-table`, migration_table.cc):
// Megatron's flags by class (implemented, no effect, refused) with the counts, and Tessera's own
// flags. tests/cli/migration_table.sh keeps the document equal to it.
std::string migration_table();

// The tokenizer flags (--tokenizer-type, --vocab-file, --merge-file, --tokenizer-model).
data::TokenizerOptions tokenizer_options(const TrainArgs& args);

// The --split weights normalised to {train, valid, test} fractions. Throws tessera::Error for
// anything but up to three non-negative numbers separated by ',' or '/' with a positive sum.
std::array<double, 3> split_fractions(const std::string& split);

// The global batch of every iteration from --global-batch-size, --rampup-batch-size or
// --step-batch-size-schedule (megatron_flags.cc). tessera::Error for a malformed schedule.
BatchSchedule batch_schedule_of(const TrainArgs& args);
// With --step-batch-size-schedule the global batch size is the schedule's last (Megatron
// refuses both); called before the default global batch is set. tessera::Error.
void apply_step_batch_size_schedule(TrainArgs& args);

// Checks combinations (fp16 with bf16, batch divisibility, required flags, the model's fit to
// the tensor-parallel size); tessera::Error.
void validate_arguments(const TrainArgs& args, int64_t data_parallel);
// Megatron-DeepSpeed's --ds-sequence-parallel-size N: --context-parallel-size N with
// --cp-comm-type a2a (DeepSpeed Ulysses); tessera::Error when other given flags contradict it.
// Called by parse_arguments, before the mesh is built.
void apply_ds_sequence_parallel(TrainArgs& args);
// The context-parallel options (part of validate_arguments; context_arguments.cc):
// --cp-comm-type's length, the hierarchical sizes, the sequence length's split into 2N chunks
// (and over TP under SP), the heads the all-to-all splits, model options CP cannot take.
// tessera::Error naming the flag.
void validate_context_parallel(const TrainArgs& args);

}  // namespace tessera::train
