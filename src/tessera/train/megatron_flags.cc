// Megatron-LM flags beyond the core table (arguments.cc): the ones Megatron's own example scripts
// and README pass (examples/gpt3/train_gpt3_175b_distributed.sh, examples/llama/*.sh,
// examples/mixtral/*.sh), each implemented, accepted with no effect on this backend, or refused
// with the feature named (docs/migration.md lists the three classes, generated from this table).
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/train/flag_groups.h"

namespace tessera::train {
namespace {

// A Megatron flag without a field of its own (FlagTable::accepted).
struct AcceptedMegatronFlag {
  const char* name;
  int values;  // 0: a switch; 1: one value; -1: one or more
  const char* reason;
};

// Accepted, with nothing to do on a CPU backend: GPU kernels and fusions, allocator and
// garbage-collector tuning, external services. Each is logged once at start.
constexpr AcceptedMegatronFlag kNoEffect[] = {
    {"--use-mcore-models", 0, "Tessera has one model implementation"},
    {"--use-legacy-models", 0, "Tessera has one model implementation"},
    {"--transformer-impl", 1, "Transformer Engine and local layers are CUDA implementations"},
    {"--attention-backend", 1,
     "flash/fused/unfused are CUDA kernels; Tessera's CPU attention is "
     "the exact (flash-style tiled) one"},
    {"--no-masked-softmax-fusion", 0, "a CUDA fusion; the CPU attention has its own"},
    {"--no-bias-gelu-fusion", 0, "a CUDA fusion"},
    {"--no-bias-swiglu-fusion", 0, "a CUDA fusion"},
    {"--no-bias-dropout-fusion", 0, "a CUDA fusion"},
    {"--no-rope-fusion", 0, "a CUDA fusion"},
    {"--no-gradient-accumulation-fusion", 0, "a CUDA fusion (fp32 accumulation is always on)"},
    {"--cross-entropy-loss-fusion", 0, "a CUDA fusion; the CPU loss is fused already"},
    {"--cross-entropy-fusion-impl", 1, "a CUDA fusion"},
    {"--apply-query-key-layer-scaling", 0,
     "an fp16 overflow guard of the CUDA softmax; the CPU "
     "softmax computes in fp32"},
    {"--tp-comm-overlap", 0, "userbuffers overlap of TP communication on NVLink"},
    {"--overlap-param-gather", 0,
     "the parameter all-gather runs right after the step (ZeRO 1-2), "
     "not under the next forward"},
    {"--overlap-param-gather-with-optimizer-step", 0, "see --overlap-param-gather"},
    {"--manual-gc", 0, "Python's garbage collector: there is none"},
    {"--manual-gc-interval", 1, "Python's garbage collector: there is none"},
    {"--empty-unused-memory-level", 1, "PyTorch's CUDA caching allocator"},
    {"--use-flash-attn", 0, "a CUDA kernel; the CPU attention is flash-style already"},
    {"--fp8-format", 1,
     "FP8 needs Transformer Engine on Hopper/Blackwell GPUs; the run computes "
     "in its 16-bit type (--bf16/--fp16) or fp32"},
    {"--fp8-recipe", 1, "see --fp8-format"},
    {"--fp8-amax-history-len", 1, "see --fp8-format"},
    {"--fp8-amax-compute-algo", 1, "see --fp8-format"},
    {"--fp8-param-gather", 0, "see --fp8-format"},
    {"--fp8-margin", 1, "see --fp8-format"},
    {"--no-create-attention-mask-in-dataloader", 0,
     "the attention mask is never materialised "
     "(causal and document masks are implicit)"},
    {"--no-mmap-bin-files", 0,
     "the .bin files are memory-mapped read-only, which reads the same "
     "bytes"},
    {"--num-workers", 1, "one background thread prefetches the micro-batches"},
    {"--ckpt-format", 1,
     "Tessera writes its own sharded format (docs/checkpoints.md); Megatron "
     "checkpoints convert through Hugging Face"},
    {"--ckpt-fully-parallel-save", 0, "every rank writes its own shards already"},
    {"--ckpt-fully-parallel-load", 0, "every rank reads its own slices already"},
    {"--dist-ckpt-strictness", 1, "see --ckpt-format"},
    {"--wandb-project", 1, "no network access from training; use --tensorboard-dir"},
    {"--wandb-exp-name", 1, "see --wandb-project"},
    {"--wandb-save-dir", 1, "see --wandb-project"},
    {"--log-interval-ms", 1, "not a Megatron flag Tessera needs"},
    {"--use-pytorch-profiler", 0, "--profile writes Tessera's Chrome timeline"},
    {"--profile-ranks", -1, "every rank is in the timeline"},
    {"--nccl-communicator-config-path", 1, "NCCL; Tessera communicates through MPI"},
    {"--use-torch-fsdp2", 0, "PyTorch FSDP2; ZeRO 3 is --zero-stage 3"},
    {"--distributed-backend", 1, "NCCL/Gloo; Tessera communicates through MPI"},
    {"--local-rank", 1, "the launcher's; Tessera reads the MPI rank"},
    {"--bf16-reduced-precision-matmul", 0, "cuBLAS reduced-precision reductions"},
    {"--log-progress", 0, "progress lines are always printed"},
    {"--timing-log-option", 1, "--timing-log-level 2 prints min and max over ranks"},
    {"--tensorboard-log-interval-ms", 1, "not needed"},
    {"--dataloader-type", 1, "single (Megatron's default) is the only order"},
    {"--async-tensor-model-parallel-allreduce", 0, "a CUDA stream overlap"},
    {"--use-cpu-initialization", 0, "weights are always initialised on the CPU"},
    {"--no-persist-layer-norm", 0, "a CUDA kernel choice"},
};

// Refused: a feature Tessera does not have yet, named, with what to use instead where there is
// something.
constexpr AcceptedMegatronFlag kRefused[] = {
    {"--qk-layernorm", 0, "normalisation of queries and keys is not implemented"},
    {"--non-persistent-save-interval", 1,
     "non-persistent checkpoints are not implemented; use --save-interval with "
     "--keep-checkpoints 1"},
    {"--use-checkpoint-args", 0,
     "taking the model's flags from a checkpoint is not implemented; give them (a Hugging Face "
     "directory in --load does supply its config)"},
    {"--fp16-lm-cross-entropy", 0, "the loss is computed in fp32"},
    {"--num-layers-per-virtual-pipeline-stage-first", 1, "not implemented"},
    {"--multi-latent-attention", 0, "multi-latent attention (DeepSeek) is not implemented"},
    {"--mtp-num-layers", 1, "multi-token prediction is not implemented"},
    {"--moe-grouped-gemm", 0, "grouped GEMM is a CUDA kernel; the experts' GEMMs run one by one"},
    {"--rotary-interleaved", 0, "interleaved RoPE pairs are not implemented"},
    {"--yaml-cfg", 1, "YAML configs are not read; use --config FILE.json"},
};

}  // namespace

void add_megatron_flags(FlagTable& t) {
  t.group(FlagGroup::kModel);
  t.option("--kv-channels", &TrainArgs::kv_channels,
           "head size; must equal hidden size / attention heads")
      ->check(CLI::PositiveNumber);
  t.option("--rotary-percent", &TrainArgs::rotary_percent,
           "fraction of each head's dimensions RoPE rotates (1.0 only)")
      ->check(CLI::Range(0.0, 1.0));
  t.flag("--no-position-embedding", &TrainArgs::no_position_embedding,
         "no learned position table (with --position-embedding-type rope)");
  t.flag("--apply-layernorm-1p", &TrainArgs::apply_layernorm_1p,
         "zero-centred norm weights: the same function, kept as the weight itself");
  t.note("--apply-layernorm-1p",
         "Megatron stores γ−1 and computes with 1+w; Tessera keeps γ (the same function and "
         "gradients; norm weights take no weight decay either way, so training matches up to "
         "rounding)");

  t.group(FlagGroup::kTraining);
  t.option("--rampup-batch-size", &TrainArgs::rampup_batch_size,
           "START INCREMENT SAMPLES: the global batch grows from START by INCREMENT over "
           "SAMPLES samples")
      ->expected(3);
  t.option("--step-batch-size-schedule", &TrainArgs::step_batch_size_schedule,
           "\"T0:B0 T1:B1 ...\": global batch B_i from T_i tokens on (T0 = 0; K/M/B/T "
           "suffixes)");
  t.flag("--deterministic-mode", &TrainArgs::deterministic_mode,
         "always on: results do not depend on threads, layout or timing");
  t.flag("--calculate-per-token-loss", &TrainArgs::calculate_per_token_loss,
         "always on: the loss is the mean over every counted token of the global batch");
  t.note("--calculate-per-token-loss",
         "Tessera always averages over the global batch's counted tokens; Megatron without the "
         "flag averages per-micro-batch means, which differs only when --eod-mask-loss masks "
         "tokens");

  t.group(FlagGroup::kOptimizer);
  t.option("--lr-warmup-samples", &TrainArgs::lr_warmup_samples, "warmup in samples")
      ->check(CLI::NonNegativeNumber);
  t.option("--lr-decay-samples", &TrainArgs::lr_decay_samples,
           "decay in samples (default: the training samples)")
      ->check(CLI::NonNegativeNumber);
  t.option("--lr-wsd-decay-samples", &TrainArgs::lr_wsd_decay_samples, "WSD decay in samples")
      ->check(CLI::NonNegativeNumber);
  t.option("--decoupled-lr", &TrainArgs::decoupled_lr,
           "peak learning rate of the input embedding and the output layer")
      ->check(CLI::NonNegativeNumber);
  t.option("--decoupled-min-lr", &TrainArgs::decoupled_min_lr, "their minimum (default --min-lr)")
      ->check(CLI::NonNegativeNumber);
  t.flag("--recompute-activations", &TrainArgs::recompute_activations,
         "Megatron's alias of --recompute-granularity selective");

  t.group(FlagGroup::kData);
  t.option("--data-args-path", &TrainArgs::data_args_path,
           "a file holding the --data-path list (whitespace-separated)");

  t.group(FlagGroup::kCheckpoint);
  t.flag("--exit-on-missing-checkpoint", &TrainArgs::exit_on_missing_checkpoint,
         "with --load: stop (exit 2) when it holds no checkpoint instead of starting afresh");
  t.option("--pretrained-checkpoint", &TrainArgs::pretrained_checkpoint,
           "when --load holds no checkpoint: finetune from this one (weights only)");
  t.flag("--override-opt_param-scheduler", &TrainArgs::override_opt_param_scheduler,
         "always on: a resumed run's schedule follows its flags");

  t.group(FlagGroup::kLogging);
  t.flag("--profile", &TrainArgs::profile,
         "write the Chrome timeline (--timeline-file, default profile.json) of Megatron's "
         "steps [--profile-step-start, --profile-step-end)");
  t.option("--profile-step-start", &TrainArgs::profile_step_start)->check(CLI::NonNegativeNumber);
  t.option("--profile-step-end", &TrainArgs::profile_step_end)->check(CLI::NonNegativeNumber);

  t.group(FlagGroup::kMegatronNoEffect);
  for (const AcceptedMegatronFlag& f : kNoEffect) t.accepted(f.name, f.values, FlagEffect::kNoEffect, f.reason);
  t.group(FlagGroup::kMegatronRefused);
  for (const AcceptedMegatronFlag& f : kRefused) t.accepted(f.name, f.values, FlagEffect::kRefused, f.reason);
}

void apply_megatron_flags(TrainArgs& args) {
  for (const AcceptedFlag& f : args.accepted_flags_given) {
    if (f.effect == FlagEffect::kRefused) throw Error(f.name + ": " + f.reason);
    args.notices.push_back(f.name + " has no effect on this backend: " + f.reason);
  }
  // Megatron's GPT-3 example names GPT-2's vocabulary and merges without --tokenizer-type: that
  // pair describes one tokenizer.
  if (args.tokenizer_type.empty() && !args.vocab_file.empty() && !args.merge_file.empty()) {
    args.tokenizer_type = "GPT2BPETokenizer";
    args.notices.push_back(
        "--vocab-file and --merge-file without --tokenizer-type: GPT2BPETokenizer");
  }
  // Megatron scripts pass these whether or not there is a checkpoint to load.
  if ((args.no_load_optim || args.no_load_rng) && args.load.empty() &&
      args.pretrained_checkpoint.empty())
    args.notices.push_back("--no-load-optim and --no-load-rng have no effect without --load");
  if (args.recompute_activations) {
    // Megatron: "--recompute-activations" sets the granularity to selective whatever was given.
    if (args.recompute_granularity == "full")
      throw Error(
          "--recompute-activations (selective recomputation) contradicts "
          "--recompute-granularity full: give one");
    args.recompute_granularity = "selective";
  }
  if (!args.data_args_path.empty()) {
    if (!args.data_path.empty())
      throw Error("--data-args-path and --data-path are mutually exclusive");
    std::ifstream in(args.data_args_path);
    if (!in) throw Error("--data-args-path " + args.data_args_path + ": cannot read it");
    std::string word;
    while (in >> word) args.data_path.push_back(word);
    if (args.data_path.empty())
      throw Error("--data-args-path " + args.data_args_path +
                  ": empty (expected the --data-path list)");
  }
  if (args.profile) {
    if (args.profile_step_end <= args.profile_step_start)
      throw Error("--profile-step-end " + std::to_string(args.profile_step_end) +
                  " must be after --profile-step-start " + std::to_string(args.profile_step_start));
    if (args.given(&TrainArgs::timeline_iteration))
      throw Error("--profile and --timeline-iteration both choose the timeline's iterations");
    if (args.timeline_file.empty()) args.timeline_file = "profile.json";
  }
  if (!args.rampup_batch_size.empty() && !args.step_batch_size_schedule.empty())
    throw Error("--rampup-batch-size and --step-batch-size-schedule are mutually exclusive");
  if (args.decoupled_min_lr >= 0 && args.decoupled_lr < 0)
    throw Error("--decoupled-min-lr goes with --decoupled-lr");
  const bool sample_schedule =
      args.lr_warmup_samples > 0 || args.lr_decay_samples > 0 || args.lr_wsd_decay_samples > 0;
  if (sample_schedule && args.train_iters > 0)
    throw Error(
        "--lr-warmup-samples, --lr-decay-samples and --lr-wsd-decay-samples go with "
        "--train-samples (sample-based training), not --train-iters");
  if (sample_schedule &&
      (args.given(&TrainArgs::lr_warmup_iters) || args.given(&TrainArgs::lr_decay_iters) ||
       args.given(&TrainArgs::lr_wsd_decay_iters)))
    throw Error("the learning-rate schedule is given in both iterations and samples: pick one");
}

BatchSchedule batch_schedule_of(const TrainArgs& args) {
  if (!args.step_batch_size_schedule.empty())
    return BatchSchedule::steps(args.step_batch_size_schedule, args.model.seq_length);
  if (!args.rampup_batch_size.empty()) {
    const std::vector<int64_t>& r = args.rampup_batch_size;
    return BatchSchedule::rampup(r[0], r[1], r[2], args.global_batch_size);
  }
  return BatchSchedule::constant(args.global_batch_size);
}

void apply_step_batch_size_schedule(TrainArgs& args) {
  if (args.step_batch_size_schedule.empty()) return;
  if (args.given(&TrainArgs::global_batch_size))
    throw Error(
        "--step-batch-size-schedule and --global-batch-size are mutually exclusive (the "
        "schedule's last batch is the global batch size)");
  args.global_batch_size = batch_schedule_of(args).final_batch();
}

// Resolved once the model is known (after presets and Hugging Face configs): the model flags
// that restate the architecture.
void check_megatron_model_flags(const TrainArgs& args) {
  const model::ModelConfig& m = args.model;
  if (args.kv_channels > 0 && m.num_attention_heads > 0 &&
      int64_t{args.kv_channels} * m.num_attention_heads != m.hidden_size)
    throw Error("--kv-channels " + std::to_string(args.kv_channels) +
                ": the head size must be --hidden-size / --num-attention-heads = " +
                std::to_string(m.hidden_size / m.num_attention_heads) +
                " (a different head size is not implemented)");
  if (args.rotary_percent != 1.0)
    throw Error("--rotary-percent " + std::to_string(args.rotary_percent) +
                ": partial rotary embeddings are not implemented (1.0 only)");
  if (args.no_position_embedding && m.position_embedding != model::PositionEmbedding::kRope)
    throw Error(
        "--no-position-embedding without --position-embedding-type rope: a model without "
        "position information is not implemented");
}

}  // namespace tessera::train
