#include "tessera/train/arguments.h"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <functional>
#include <map>

#include "tessera/checkpoint/hf_import.h"
#include "tessera/core/error.h"
#include "tessera/data/gpt_dataset.h"
#include "tessera/data/tokenizer.h"
#include "tessera/kernels/build_info.h"
#include "tessera/train/json_config.h"

namespace tessera::train {
namespace {

using model::ModelConfig;

// Model flags write into a scratch config; after parsing, only the flags that were given
// (on the command line or in --config) are copied over the preset.
class ModelFlags {
 public:
  ModelFlags(CLI::App& app, ModelConfig& scratch) : app_(app), scratch_(scratch) {}

  template <typename V>
  void add(const char* flag, V ModelConfig::*field, const char* help) {
    CLI::Option* opt = app_.add_option(flag, scratch_.*field, help);
    copies_.push_back([opt, field](ModelConfig& dst, const ModelConfig& src) {
      if (opt->count() > 0) dst.*field = src.*field;
    });
  }
  // A boolean flag: `--swiglu`, `--swiglu=false`, or `"swiglu": false` in --config. The field
  // becomes `value` when the flag is true and !value when it is false (for --disable-*).
  void add_flag(const char* flag, bool ModelConfig::*field, bool value, const char* help) {
    auto parsed = std::make_shared<bool>(false);
    flag_values_.push_back(parsed);
    CLI::Option* opt = app_.add_flag(std::string(flag), *parsed, help);
    copies_.push_back([opt, field, value, parsed](ModelConfig& dst, const ModelConfig&) {
      if (opt->count() > 0) dst.*field = *parsed ? value : !value;
    });
  }
  // An option naming one of `names`; anything else is an error listing them.
  template <typename E>
  void add_enum(const char* flag, E ModelConfig::*field, std::map<std::string, E> names,
                const char* help) {
    auto parsed = std::make_shared<std::string>();
    std::vector<std::string> allowed;
    for (const auto& [name, v] : names) allowed.push_back(name);
    CLI::Option* opt = app_.add_option(flag, *parsed, help)->check(CLI::IsMember(allowed));
    copies_.push_back([opt, field, names, parsed](ModelConfig& dst, const ModelConfig&) {
      if (opt->count() > 0) dst.*field = names.at(*parsed);
    });
    enum_values_.push_back(parsed);
  }
  void apply(ModelConfig& dst) const {
    for (const auto& copy : copies_) copy(dst, scratch_);
  }

 private:
  CLI::App& app_;
  ModelConfig& scratch_;
  std::vector<std::function<void(ModelConfig&, const ModelConfig&)>> copies_;
  std::vector<std::shared_ptr<bool>> flag_values_;           // storage CLI11 writes flags into
  std::vector<std::shared_ptr<std::string>> enum_values_;
};

void add_model_flags(ModelFlags& m) {
  m.add("--num-layers", &ModelConfig::num_layers, "transformer layers");
  m.add("--hidden-size", &ModelConfig::hidden_size, "hidden size C");
  m.add("--num-attention-heads", &ModelConfig::num_attention_heads, "attention heads");
  m.add("--ffn-hidden-size", &ModelConfig::ffn_hidden_size, "MLP hidden size (default 4C)");
  m.add("--seq-length", &ModelConfig::seq_length, "sequence length");
  m.add("--max-position-embeddings", &ModelConfig::max_position_embeddings,
        "learned position table size (default: seq length)");
  m.add("--vocab-size", &ModelConfig::vocab_size, "vocabulary size (before padding)");
  m.add("--make-vocab-size-divisible-by", &ModelConfig::make_vocab_size_divisible_by,
        "pad the vocabulary to a multiple of this (x TP)");
  m.add_enum("--normalization", &ModelConfig::normalization,
             {{"LayerNorm", model::Normalization::kLayerNorm},
              {"RMSNorm", model::Normalization::kRMSNorm}},
             "LayerNorm or RMSNorm");
  m.add("--norm-epsilon", &ModelConfig::norm_epsilon, "epsilon of the norms");
  m.add_flag("--swiglu", &ModelConfig::swiglu, true, "SwiGLU MLP");
  m.add_enum("--position-embedding-type", &ModelConfig::position_embedding,
             {{"learned_absolute", model::PositionEmbedding::kLearnedAbsolute},
              {"rope", model::PositionEmbedding::kRope}},
             "learned_absolute or rope");
  m.add("--rotary-base", &ModelConfig::rotary_base, "RoPE theta");
  m.add_flag("--group-query-attention", &ModelConfig::group_query_attention, true, "use GQA");
  m.add("--num-query-groups", &ModelConfig::num_query_groups, "key/value groups for GQA");
  m.add_flag("--untie-embeddings-and-output-weights",
             &ModelConfig::untie_embeddings_and_output_weights, true, "separate output layer");
  m.add_flag("--disable-bias-linear", &ModelConfig::add_bias_linear, false, "no linear biases");
  m.add("--attention-dropout", &ModelConfig::attention_dropout, "attention dropout probability");
  m.add("--hidden-dropout", &ModelConfig::hidden_dropout, "hidden dropout probability");
  m.add("--init-method-std", &ModelConfig::init_method_std, "std of the normal initialisation");
}

}  // namespace

int64_t TrainArgs::num_microbatches(int64_t data_parallel) const {
  return global_batch_size / (micro_batch_size * data_parallel);
}

bool parse_arguments(int argc, const char* const* argv, TrainArgs& args) {
  CLI::App app{"tessera-train: train a GPT/LLaMA-style language model", "tessera-train"};
  app.set_version_flag("--version", kernels::version_line);
  app.option_defaults()->always_capture_default();
  app.config_formatter(std::make_shared<JsonConfig>());
  app.set_config("--config", "", "JSON file of flags (keys without dashes); flags on the command line win");
  app.allow_config_extras(CLI::config_extras_mode::error);

  ModelConfig scratch;
  ModelFlags model_flags(app, scratch);
  app.add_option("--model", args.model_preset,
                 "preset: gpt2-tiny, gpt2-124m, gpt2-350m, llama-tiny, llama-1b");
  add_model_flags(model_flags);

  app.add_option("--micro-batch-size", args.micro_batch_size)->check(CLI::PositiveNumber);
  app.add_option("--global-batch-size", args.global_batch_size)->check(CLI::PositiveNumber);
  auto* iters = app.add_option("--train-iters", args.train_iters)->check(CLI::PositiveNumber);
  app.add_option("--train-samples", args.train_samples)->check(CLI::PositiveNumber)->excludes(iters);
  app.add_option("--exit-interval", args.exit_interval)->check(CLI::NonNegativeNumber);
  app.add_option("--exit-duration-in-mins", args.exit_duration_in_mins)->check(CLI::NonNegativeNumber);
  app.add_option("--eval-interval", args.eval_interval)->check(CLI::NonNegativeNumber);
  app.add_option("--eval-iters", args.eval_iters)->check(CLI::NonNegativeNumber);

  app.add_option("--optimizer", args.optimizer)->check(CLI::IsMember({"adam", "adamw", "sgd"}));
  app.add_option("--lr", args.lr)->check(CLI::NonNegativeNumber);
  app.add_option("--min-lr", args.min_lr)->check(CLI::NonNegativeNumber);
  app.add_option("--adam-beta1", args.adam_beta1)->check(CLI::Range(0.0, 1.0));
  app.add_option("--adam-beta2", args.adam_beta2)->check(CLI::Range(0.0, 1.0));
  app.add_option("--adam-eps", args.adam_eps)->check(CLI::PositiveNumber);
  app.add_option("--sgd-momentum", args.sgd_momentum)->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-decay", args.weight_decay)->check(CLI::NonNegativeNumber);
  app.add_option("--clip-grad", args.clip_grad)->check(CLI::NonNegativeNumber);
  auto* warm = app.add_option("--lr-warmup-iters", args.lr_warmup_iters)->check(CLI::NonNegativeNumber);
  app.add_option("--lr-warmup-fraction", args.lr_warmup_fraction)->check(CLI::Range(0.0, 1.0))->excludes(warm);
  app.add_option("--lr-decay-iters", args.lr_decay_iters)->check(CLI::NonNegativeNumber);
  app.add_option("--lr-decay-style", args.lr_decay_style)
      ->check(CLI::IsMember({"constant", "linear", "cosine", "inverse-square-root", "WSD"}));
  app.add_option("--lr-wsd-decay-iters", args.lr_wsd_decay_iters)->check(CLI::NonNegativeNumber);
  app.add_option("--lr-wsd-decay-style", args.lr_wsd_decay_style)
      ->check(CLI::IsMember({"linear", "cosine", "exponential", "minus_sqrt"}));

  app.add_flag("--bf16", args.bf16, "bf16 compute, fp32 master weights and gradients");
  app.add_flag("--fp16", args.fp16, "fp16 compute with loss scaling");
  app.add_option("--loss-scale", args.loss_scale, "static loss scale (default: dynamic)")
      ->check(CLI::PositiveNumber);
  app.add_option("--initial-loss-scale", args.initial_loss_scale)->check(CLI::PositiveNumber);
  app.add_option("--min-loss-scale", args.min_loss_scale)->check(CLI::PositiveNumber);
  app.add_option("--loss-scale-window", args.loss_scale_window)->check(CLI::PositiveNumber);
  app.add_option("--hysteresis", args.hysteresis)->check(CLI::PositiveNumber);
  app.add_flag("--skip-nan-iterations", args.skip_nan_iterations,
               "skip iterations whose loss or gradients are NaN/Inf instead of stopping");

  app.add_flag("--mock-data", args.mock_data, "synthetic learnable token stream");
  app.add_option("--data-path", args.data_path,
                 "indexed dataset prefixes (PREFIX.bin/.idx), optionally weighted: 0.3 A 0.7 B");
  app.add_option("--train-data-path", args.train_data_path, "training blend (instead of --split)");
  app.add_option("--valid-data-path", args.valid_data_path, "validation blend");
  app.add_option("--test-data-path", args.test_data_path, "test blend");
  app.add_option("--data-cache-path", args.data_cache_path, "where dataset indices are cached");
  app.add_flag("--eod-mask-loss", args.eod_mask_loss, "no loss on predictions made from EOD");
  app.add_flag("--reset-position-ids", args.reset_position_ids, "positions restart after EOD");
  app.add_flag("--reset-attention-mask", args.reset_attention_mask,
               "tokens attend only within their document");
  app.add_option("--tokenizer-type", args.tokenizer_type)
      ->check(CLI::IsMember(data::tokenizer_types()));
  app.add_option("--vocab-file", args.vocab_file, "GPT2BPETokenizer: encoder.json");
  app.add_option("--merge-file", args.merge_file, "GPT2BPETokenizer: vocab.bpe");
  app.add_option("--tokenizer-model", args.tokenizer_model,
                 "HuggingFaceTokenizer: tokenizer.json; SentencePieceTokenizer: .model");
  app.add_option("--split", args.split, "train,valid,test weights");

  app.add_option("--tensor-model-parallel-size", args.tensor_model_parallel_size)->check(CLI::PositiveNumber);
  app.add_flag("--sequence-parallel", args.sequence_parallel,
               "split norms, dropout and residuals along the sequence across the TP group");
  app.add_option("--pipeline-model-parallel-size", args.pipeline_model_parallel_size)->check(CLI::PositiveNumber);
  app.add_option("--pipeline-schedule", args.pipeline_schedule,
                 "gpipe, 1f1b (default) or interleaved (default with virtual stages)")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
  app.add_option("--num-layers-per-virtual-pipeline-stage", args.num_layers_per_virtual_stage,
                 "layers per model chunk: interleaved 1F1B with several chunks per rank")
      ->check(CLI::PositiveNumber);
  app.add_option("--decoder-first-pipeline-num-layers", args.decoder_first_pipeline_num_layers,
                 "layers on the first pipeline stage (uneven split)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--decoder-last-pipeline-num-layers", args.decoder_last_pipeline_num_layers,
                 "layers on the last pipeline stage (uneven split)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--timeline-file", args.timeline_file,
                 "write a Chrome trace (Perfetto) of every rank's phases for one iteration");
  app.add_option("--timeline-iteration", args.timeline_iteration,
                 "the iteration --timeline-file records (default: the last)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--recompute-granularity", args.recompute_granularity,
                 "full (whole layers) or selective (the attention core)")
      ->check(CLI::IsMember({"full", "selective"}));
  app.add_option("--recompute-method", args.recompute_method,
                 "with full: uniform (groups of --recompute-num-layers) or block (the first N)")
      ->check(CLI::IsMember({"uniform", "block"}));
  app.add_option("--recompute-num-layers", args.recompute_num_layers,
                 "with full: layers per recompute group (uniform) or recomputed layers (block)")
      ->check(CLI::PositiveNumber);
  app.add_option("--context-parallel-size", args.context_parallel_size)->check(CLI::PositiveNumber);
  app.add_option("--expert-model-parallel-size", args.expert_model_parallel_size)->check(CLI::PositiveNumber);
  app.add_option("--zero-stage", args.zero_stage, "ZeRO stage: 0 (replicated), 1 (sharded optimizer), 2 (+ gradients), 3 (+ parameters)")
      ->check(CLI::Range(0, 3));
  app.add_flag("--use-distributed-optimizer", args.use_distributed_optimizer,
               "shard optimizer state over data parallel ranks (ZeRO stage 1)");
  app.add_flag("--overlap-grad-reduce,!--no-overlap-grad-reduce", args.overlap_grad_reduce,
               "reduce gradient buckets during the last micro-batch's backward (default on)");
  app.add_option("--ddp-bucket-size", args.ddp_bucket_size, "gradient bucket size in elements")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stage3-prefetch-bucket-size", args.stage3_prefetch_bucket_size,
                 "ZeRO 3: gather the next units of a pass ahead while those gathered ahead and not yet "
                 "used total at most this many elements")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stage3-param-persistence-threshold", args.stage3_param_persistence_threshold,
                 "ZeRO 3: units with fewer elements stay whole")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stage3-max-live-parameters", args.stage3_max_live_parameters,
                 "ZeRO 3: at most this many gathered elements at any time (prefetched units give way; "
                 "units in use always stay)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--print-mesh", args.print_mesh, "print every rank's coordinates and groups, then exit");
  app.add_option("--distributed-timeout-minutes", args.distributed_timeout_minutes,
                 "abort the job when a communication does not complete within this time "
                 "(default: TESSERA_DISTRIBUTED_TIMEOUT_SECONDS, else 10 minutes)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--check-collectives", args.check_collectives,
               "compare every rank's sequence of collectives; report the first mismatch "
               "(also on with TESSERA_CHECK_COLLECTIVES=1)");

  app.add_option("--seed", args.seed);
  app.add_option("--log-interval", args.log_interval)->check(CLI::PositiveNumber);
  app.add_option("--timing-log-level", args.timing_log_level,
                 "0: iteration time only; 1: also rank 0's time per phase (forward, backward, "
                 "waits for pipeline transfers, gradient reduction, optimizer); 2: and each "
                 "phase's minimum and maximum over all ranks")
      ->check(CLI::Range(0, 2));
  app.add_option("--metrics-file", args.metrics_file, "JSON lines of per-iteration metrics");
  app.add_option("--export-weights", args.export_weights,
                 "write final weights (safetensors) and config.json for Hugging Face");
  app.add_option("--num-threads", args.num_threads, "threads per process (default cores/ranks)")
      ->check(CLI::NonNegativeNumber);

  app.add_option("--save", args.save, "checkpoint directory (sharded, any layout can load it)");
  app.add_option("--save-interval", args.save_interval, "iterations between checkpoints")
      ->check(CLI::PositiveNumber);
  app.add_flag("--async-save", args.async_save,
               "write checkpoints on a background thread while training continues");
  app.add_option("--keep-checkpoints", args.keep_checkpoints,
                 "keep only the newest K checkpoints in --save (default: all)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-save-optim", args.no_save_optim, "save weights only, no optimizer state");
  app.add_option("--load", args.load,
                 "resume from a checkpoint directory (any layout), or start from a Hugging "
                 "Face model directory (config.json + model.safetensors)");
  app.add_flag("--finetune", args.finetune,
               "load weights only: iteration, data position and optimizer start afresh");
  app.add_flag("--no-load-optim", args.no_load_optim, "do not load the optimizer state");
  app.add_flag("--no-load-rng", args.no_load_rng, "take the seed from --seed, not the checkpoint");
  app.add_option("--kill-during-save-at-iteration", args.kill_during_save_at,
                 "test hook: the last rank kills itself in the middle of this iteration's save");
  app.add_option("--inject-overflow-at-iteration", args.inject_overflow_at,
                 "test hook: make this iteration's gradients overflow");
  app.add_flag("--deepspeed", args.deepspeed, "use a DeepSpeed JSON config (--deepspeed_config)");
  app.add_option("--deepspeed_config,--deepspeed-config", args.deepspeed_config,
                 "DeepSpeed JSON: batch sizes, zero_optimization, fp16/bf16, optimizer, "
                 "scheduler, gradient_clipping");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return false;
  } catch (const CLI::CallForVersion& e) {
    std::printf("%s\n", e.what());
    return false;
  } catch (const CLI::ConfigError& e) {
    std::string what = e.what();
    const std::string extras = "INI was not able to parse ";
    if (what.rfind(extras, 0) == 0)
      throw Error("--config: '" + what.substr(extras.size()) + "' is not a tessera-train flag");
    throw Error("--config: " + one_line(what));
  } catch (const CLI::ParseError& e) {
    throw Error(one_line(e.what()));
  }

  for (const CLI::Option* opt : app.get_options())
    if (opt->count() > 0 && !opt->get_lnames().empty())
      args.explicit_flags.insert("--" + opt->get_lnames().front());
  if (args.deepspeed != !args.deepspeed_config.empty())
    throw Error("--deepspeed and --deepspeed_config FILE go together");
  // --load of a Hugging Face directory: its config.json is the model unless --model names a
  // preset (explicit model flags apply on top either way; a mismatch fails at load, by tensor);
  // its tokenizer.json is the tokenizer unless one is given.
  const bool hf_load = !args.load.empty() && checkpoint::is_hf_directory(args.load);
  if (!args.model_preset.empty()) {
    args.model = model::preset(args.model_preset);
  } else if (hf_load) {
    args.model = checkpoint::read_hf_config(args.load);
  }
  model_flags.apply(args.model);
  const std::string hf_tokenizer = args.load + "/tokenizer.json";
  if (hf_load && args.tokenizer_type.empty() && !args.mock_data &&
      std::filesystem::exists(hf_tokenizer)) {
    args.tokenizer_type = "HuggingFaceTokenizer";
    args.tokenizer_model = hf_tokenizer;
  }
  // The tokenizer determines the vocabulary unless --vocab-size says otherwise.
  // The tokenizer is loaded here so that a bad vocabulary file fails before any work.
  // Every way of naming a tokenizer (its flags, --config, --load of a Hugging Face directory)
  // has set tokenizer_type by now, so this is the run's one load.
  if (!args.tokenizer_type.empty()) {
    const auto tokenizer = data::make_tokenizer(tokenizer_options(args));
    // (A Hugging Face model's vocabulary is its embedding's rows, whatever its tokenizer says.)
    if (app.get_option("--vocab-size")->count() == 0 && !hf_load)
      args.model.vocab_size = tokenizer->vocab_size();
    // A tokenizer without an EOD is not an error yet: the trainer's own load reports it where
    // it always has (after the runtime is up), so the id is simply left unrecorded.
    try {
      args.tokenizer_eod = tokenizer->eod();
    } catch (const Error&) {
      args.tokenizer_eod.reset();
    }
  }
  return true;
}

data::TokenizerOptions tokenizer_options(const TrainArgs& args) {
  data::TokenizerOptions t;
  t.type = args.tokenizer_type;
  t.vocab_file = args.vocab_file;
  t.merge_file = args.merge_file;
  t.tokenizer_model = args.tokenizer_model;
  return t;
}

std::array<double, 3> split_fractions(const std::string& split) {
  const auto bad = [&](const std::string& why) {
    return Error("--split '" + split + "': " + why + " (expected up to three comma-separated weights, e.g. 969,30,1)");
  };
  std::array<double, 3> w{0, 0, 0};
  size_t start = 0;
  for (int i = 0;; ++i) {
    const size_t end = std::min(split.find_first_of(",/", start), split.size());
    if (i == 3) throw bad("more than three weights");
    const std::string field = split.substr(start, end - start);
    size_t used = 0;
    try {
      w[i] = std::stod(field, &used);
    } catch (const std::exception&) {
      throw bad("'" + field + "' is not a number");
    }
    if (used != field.size()) throw bad("'" + field + "' is not a number");
    if (!(w[i] >= 0)) throw bad("weights must be >= 0");
    if (end == split.size()) break;
    start = end + 1;
  }
  const double total = w[0] + w[1] + w[2];
  if (!(total > 0)) throw bad("weights sum to zero");
  for (double& x : w) x /= total;
  return w;
}

void validate_arguments(const TrainArgs& args, int64_t data_parallel) {
  split_fractions(args.split);
  args.model.validate();
  args.model.validate_tensor_parallel(args.tensor_model_parallel_size, args.sequence_parallel);
  if (args.bf16 && args.fp16) throw Error("--fp16 and --bf16 are mutually exclusive: pick one");
  // With virtual stages the gradients are reduced after the last micro-batch (the default then
  // logs "overlap off"); an explicit request for overlap would not be honoured.
  if (args.num_layers_per_virtual_stage > 0 && args.overlap_grad_reduce &&
      args.explicit_flags.count("--overlap-grad-reduce"))
    throw Error("--overlap-grad-reduce is not supported with --num-layers-per-virtual-pipeline-"
                "stage: gradients are reduced after the last micro-batch's backward (drop the "
                "flag or give --no-overlap-grad-reduce)");
  if (args.lr < 0) throw Error("--lr is required (the peak learning rate)");
  if (args.train_iters == 0 && args.train_samples == 0)
    throw Error("--train-iters or --train-samples is required");
  if (args.global_batch_size % (args.micro_batch_size * data_parallel) != 0)
    throw Error("--global-batch-size " + std::to_string(args.global_batch_size) +
                " is not divisible by --micro-batch-size " + std::to_string(args.micro_batch_size) +
                " x data-parallel size " + std::to_string(data_parallel));
  if (args.train_samples > 0 && args.train_samples % args.global_batch_size != 0)
    throw Error("--train-samples " + std::to_string(args.train_samples) +
                " is not a multiple of --global-batch-size " +
                std::to_string(args.global_batch_size));
  const bool per_split = !args.train_data_path.empty() || !args.valid_data_path.empty() ||
                         !args.test_data_path.empty();
  if (!args.mock_data && args.data_path.empty() && !per_split)
    throw Error("no data: give --data-path PREFIX or --mock-data");
  if (args.mock_data && (!args.data_path.empty() || per_split))
    throw Error("--mock-data and --data-path are mutually exclusive");
  if (!args.data_path.empty() && per_split)
    throw Error("--data-path and --train-data-path/--valid-data-path/--test-data-path are "
                "mutually exclusive");
  if (per_split && args.train_data_path.empty())
    throw Error("--valid-data-path/--test-data-path need --train-data-path");
  // Blend syntax is checked now, before any rank opens a file.
  if (!args.data_path.empty()) data::parse_blend(args.data_path, "--data-path");
  if (!args.train_data_path.empty()) data::parse_blend(args.train_data_path, "--train-data-path");
  if (!args.valid_data_path.empty()) data::parse_blend(args.valid_data_path, "--valid-data-path");
  if (!args.test_data_path.empty()) data::parse_blend(args.test_data_path, "--test-data-path");
  if ((args.eod_mask_loss || args.reset_position_ids || args.reset_attention_mask) &&
      args.tokenizer_type.empty())
    throw Error("--eod-mask-loss, --reset-position-ids and --reset-attention-mask need the EOD "
                "id: give --tokenizer-type");
  if (args.timeline_iteration > 0) {
    const int64_t iters = args.train_iters > 0 ? args.train_iters
                                               : args.train_samples / args.global_batch_size;
    if (args.timeline_iteration > iters)
      throw Error("--timeline-iteration " + std::to_string(args.timeline_iteration) +
                  " is after the last iteration (" + std::to_string(iters) + ")");
  }
  if (args.recompute_granularity == "full" &&
      (args.recompute_method.empty() || args.recompute_num_layers == 0))
    throw Error("--recompute-granularity full needs --recompute-method (uniform or block) and "
                "--recompute-num-layers N");
  if (args.recompute_granularity != "full" &&
      (!args.recompute_method.empty() || args.recompute_num_layers > 0))
    throw Error("--recompute-method and --recompute-num-layers go with "
                "--recompute-granularity full");
  if (args.lr_decay_style == "WSD" && args.lr_wsd_decay_iters == 0)
    throw Error("--lr-decay-style WSD needs --lr-wsd-decay-iters");
  if (args.save_interval > 0 && args.save.empty())
    throw Error("--save-interval needs --save DIR");
  if ((args.async_save || args.keep_checkpoints > 0 || args.no_save_optim) && args.save.empty())
    throw Error("--async-save, --keep-checkpoints and --no-save-optim need --save DIR");
  if ((args.finetune || args.no_load_optim || args.no_load_rng) && args.load.empty())
    throw Error("--finetune, --no-load-optim and --no-load-rng need --load DIR");
}

}  // namespace tessera::train
