#include "tessera/train/arguments.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>

#include "tessera/core/error.h"
#include "tessera/data/gpt_dataset.h"
#include "tessera/data/tokenizer.h"
#include "tessera/kernels/build_info.h"
#include "tessera/train/deepspeed_keys.h"
#include "tessera/train/flag_groups.h"
#include "tessera/train/flag_table.h"
#include "tessera/train/json_config.h"

namespace tessera::train {
namespace {

using model::ModelConfig;

// The table, one function per concern (flag_table.h). Defaults are TrainArgs' and ModelConfig's
// initial values; model flags override the --model preset field by field.

// Mixture of Experts, Megatron-Core's flags (model/moe_layer.h, docs/moe.md).
void add_moe_flags(FlagTable& t) {
  using model::MoeConfig;
  t.model_option("--num-experts", &ModelConfig::moe, &MoeConfig::num_experts,
                 "experts per MoE layer (0: dense MLPs)");
  t.model_option("--moe-layer-freq", &ModelConfig::moe, &MoeConfig::layer_freq,
                 "MoE layers: N (every Nth, from layer 0) or a 0/1 list per layer, e.g. [1,0]*2");
  t.model_option("--moe-ffn-hidden-size", &ModelConfig::moe, &MoeConfig::ffn_hidden_size,
                 "expert MLP hidden size (default --ffn-hidden-size)");
  t.model_option("--moe-shared-expert-intermediate-size", &ModelConfig::moe,
                 &MoeConfig::shared_expert_size, "a shared expert of this size (0: none)");
  t.model_enum("--moe-router-dtype", &ModelConfig::moe, &MoeConfig::router_fp64,
               model::moe_router_dtype_names(), "router logits in fp32 or fp64");
  t.model_enum("--moe-router-score-function", &ModelConfig::moe, &MoeConfig::score,
               model::moe_score_function_names(), "softmax or sigmoid");
  t.model_flag("--moe-router-pre-softmax", &ModelConfig::moe, &MoeConfig::pre_softmax, true,
               "softmax over all experts before top-k (softmax scores)");
  t.model_option("--moe-router-topk", &ModelConfig::moe, &MoeConfig::topk, "experts per token");
  t.model_option("--moe-router-topk-scaling-factor", &ModelConfig::moe, &MoeConfig::topk_scaling,
                 "multiplies the routing weights");
  t.model_enum("--moe-router-load-balancing-type", &ModelConfig::moe, &MoeConfig::load_balancing,
               model::moe_load_balancing_names(), "aux_loss, seq_aux_loss or none");
  t.model_option("--moe-aux-loss-coeff", &ModelConfig::moe, &MoeConfig::aux_loss_coeff,
                 "load-balancing loss coefficient");
  t.model_option("--moe-z-loss-coeff", &ModelConfig::moe, &MoeConfig::z_loss_coeff,
                 "router z-loss coefficient");
  t.model_flag("--moe-router-enable-expert-bias", &ModelConfig::moe, &MoeConfig::expert_bias, true,
               "aux-loss-free balancing: a per-expert bias that only chooses (sigmoid scores)");
  t.model_option("--moe-router-bias-update-rate", &ModelConfig::moe, &MoeConfig::bias_update_rate,
                 "expert bias step per iteration");
  t.model_option("--moe-expert-capacity-factor", &ModelConfig::moe, &MoeConfig::capacity_factor,
                 "keep at most ceil(tokens*k/E*factor) tokens per expert (default: dropless)")
      ->check(CLI::PositiveNumber);
  t.model_enum("--moe-token-drop-policy", &ModelConfig::moe, &MoeConfig::drop_policy,
               model::moe_drop_policy_names(),
               "which tokens an expert over capacity keeps: probs or position");
  t.model_flag("--moe-pad-expert-input-to-capacity", &ModelConfig::moe, &MoeConfig::pad_to_capacity,
               true, "pad every expert's rows to the capacity");
  t.model_enum("--moe-token-dispatcher-type", &ModelConfig::moe, &MoeConfig::dispatcher,
               model::moe_dispatcher_names(),
               "expert parallelism's row exchange: alltoall or allgather (same results)");
}

void add_model_flags(FlagTable& t) {
  t.group(FlagGroup::kModel);
  t.option("--model", &TrainArgs::model_preset,
           "preset: gpt2-tiny, gpt2-124m, gpt2-350m, llama-tiny, llama-1b, mixtral-tiny, moe-tiny");
  t.model_option("--num-layers", &ModelConfig::num_layers, "transformer layers");
  t.model_option("--hidden-size", &ModelConfig::hidden_size, "hidden size C");
  t.model_option("--num-attention-heads", &ModelConfig::num_attention_heads, "attention heads");
  t.model_option("--ffn-hidden-size", &ModelConfig::ffn_hidden_size,
                 "MLP hidden size (default 4C)");
  t.model_option("--seq-length", &ModelConfig::seq_length, "sequence length");
  t.model_option("--max-position-embeddings", &ModelConfig::max_position_embeddings,
                 "learned position table size (default: seq length)");
  t.model_option("--vocab-size", &ModelConfig::vocab_size, "vocabulary size (before padding)");
  t.model_option("--make-vocab-size-divisible-by", &ModelConfig::make_vocab_size_divisible_by,
                 "pad the vocabulary to a multiple of this (x TP)");
  t.model_enum(
      "--normalization", &ModelConfig::normalization,
      std::map<std::string, model::Normalization>{{"LayerNorm", model::Normalization::kLayerNorm},
                                                  {"RMSNorm", model::Normalization::kRMSNorm}},
      "LayerNorm or RMSNorm");
  t.model_option("--norm-epsilon", &ModelConfig::norm_epsilon, "epsilon of the norms");
  t.model_flag("--swiglu", &ModelConfig::swiglu, true, "SwiGLU MLP");
  t.model_enum("--position-embedding-type", &ModelConfig::position_embedding,
               std::map<std::string, model::PositionEmbedding>{
                   {"learned_absolute", model::PositionEmbedding::kLearnedAbsolute},
                   {"rope", model::PositionEmbedding::kRope}},
               "learned_absolute or rope");
  t.model_option("--rotary-base", &ModelConfig::rotary_base, "RoPE theta");
  t.model_flag("--use-rope-scaling", &ModelConfig::rope_scaling, &kernels::RopeScaling::llama3,
               true,
               "Llama 3.x RoPE frequency rescaling (low/high freq factors 1 and 4, original "
               "context 8192)");
  t.model_option("--rope-scaling-factor", &ModelConfig::rope_scaling, &kernels::RopeScaling::factor,
                 "Llama 3.x RoPE scaling factor");
  t.model_flag("--group-query-attention", &ModelConfig::group_query_attention, true, "use GQA");
  t.model_option("--num-query-groups", &ModelConfig::num_query_groups, "key/value groups for GQA");
  t.model_flag("--untie-embeddings-and-output-weights",
               &ModelConfig::untie_embeddings_and_output_weights, true, "separate output layer");
  t.model_flag("--disable-bias-linear", &ModelConfig::add_bias_linear, false, "no linear biases");
  t.model_flag("--add-qkv-bias", &ModelConfig::add_qkv_bias, true,
               "biases on the q/k/v projections even with --disable-bias-linear (Qwen2)");
  t.model_option("--attention-dropout", &ModelConfig::attention_dropout,
                 "attention dropout probability");
  t.model_option("--hidden-dropout", &ModelConfig::hidden_dropout, "hidden dropout probability");
  t.model_option("--init-method-std", &ModelConfig::init_method_std,
                 "std of the normal initialisation");
  add_moe_flags(t);
}

void add_training_flags(FlagTable& t) {
  t.group(FlagGroup::kTraining);
  t.option("--micro-batch-size", &TrainArgs::micro_batch_size)->check(CLI::PositiveNumber);
  t.option("--global-batch-size", &TrainArgs::global_batch_size,
           "samples per iteration (default: micro batch x data-parallel size)")
      ->check(CLI::PositiveNumber);
  auto* iters = t.option("--train-iters", &TrainArgs::train_iters)->check(CLI::PositiveNumber);
  t.option("--train-samples", &TrainArgs::train_samples, "instead of --train-iters")
      ->check(CLI::PositiveNumber)
      ->excludes(iters);
  t.option("--exit-interval", &TrainArgs::exit_interval, "stop after this iteration")
      ->check(CLI::NonNegativeNumber);
  t.option("--exit-duration-in-mins", &TrainArgs::exit_duration_in_mins)
      ->check(CLI::NonNegativeNumber);
  t.flag("--exit-signal-handler", &TrainArgs::exit_signal_handler,
         "on SIGTERM (any rank), finish the iteration, save a checkpoint (--save) and exit 0 on "
         "every rank");
  t.option("--eval-interval", &TrainArgs::eval_interval)->check(CLI::NonNegativeNumber);
  t.option("--eval-iters", &TrainArgs::eval_iters)->check(CLI::NonNegativeNumber);
  t.option("--seed", &TrainArgs::seed, "initialisation, dropout and data order");
  t.option("--num-threads", &TrainArgs::num_threads, "threads per process (default cores/ranks)")
      ->check(CLI::NonNegativeNumber);
}

void add_optimizer_flags(FlagTable& t) {
  t.group(FlagGroup::kOptimizer);
  t.option("--optimizer", &TrainArgs::optimizer, "adam (AdamW, decoupled decay) or sgd")
      ->check(CLI::IsMember({"adam", "adamw", "sgd"}));
  t.option("--lr", &TrainArgs::lr, "peak learning rate (required)")->check(CLI::NonNegativeNumber);
  t.option("--min-lr", &TrainArgs::min_lr)->check(CLI::NonNegativeNumber);
  t.option("--adam-beta1", &TrainArgs::adam_beta1)->check(CLI::Range(0.0, 1.0));
  t.option("--adam-beta2", &TrainArgs::adam_beta2)->check(CLI::Range(0.0, 1.0));
  t.option("--adam-eps", &TrainArgs::adam_eps)->check(CLI::PositiveNumber);
  t.option("--sgd-momentum", &TrainArgs::sgd_momentum)->check(CLI::Range(0.0, 1.0));
  t.option("--weight-decay", &TrainArgs::weight_decay)->check(CLI::NonNegativeNumber);
  t.option("--clip-grad", &TrainArgs::clip_grad, "gradient-norm clipping (0 disables)")
      ->check(CLI::NonNegativeNumber);
  auto* warm =
      t.option("--lr-warmup-iters", &TrainArgs::lr_warmup_iters)->check(CLI::NonNegativeNumber);
  t.option("--lr-warmup-fraction", &TrainArgs::lr_warmup_fraction,
           "warmup as a fraction of the decay iterations")
      ->check(CLI::Range(0.0, 1.0))
      ->excludes(warm);
  t.option("--lr-decay-iters", &TrainArgs::lr_decay_iters, "default: the training iterations")
      ->check(CLI::NonNegativeNumber);
  t.option("--lr-decay-style", &TrainArgs::lr_decay_style)
      ->check(CLI::IsMember({"constant", "linear", "cosine", "inverse-square-root", "WSD"}));
  t.option("--lr-wsd-decay-iters", &TrainArgs::lr_wsd_decay_iters)->check(CLI::NonNegativeNumber);
  t.option("--lr-wsd-decay-style", &TrainArgs::lr_wsd_decay_style)
      ->check(CLI::IsMember({"linear", "cosine", "exponential", "minus_sqrt"}));
}

void add_precision_flags(FlagTable& t) {
  t.group(FlagGroup::kPrecision);
  t.flag("--bf16", &TrainArgs::bf16, "bf16 compute, fp32 master weights and gradients");
  t.flag("--fp16", &TrainArgs::fp16, "fp16 compute with loss scaling");
  t.option("--loss-scale", &TrainArgs::loss_scale, "static loss scale (default: dynamic)")
      ->check(CLI::PositiveNumber);
  t.option("--initial-loss-scale", &TrainArgs::initial_loss_scale)->check(CLI::PositiveNumber);
  t.option("--min-loss-scale", &TrainArgs::min_loss_scale)->check(CLI::PositiveNumber);
  t.option("--loss-scale-window", &TrainArgs::loss_scale_window)->check(CLI::PositiveNumber);
  t.option("--hysteresis", &TrainArgs::hysteresis)->check(CLI::PositiveNumber);
  t.flag("--skip-nan-iterations", &TrainArgs::skip_nan_iterations,
         "skip iterations whose loss or gradients are NaN/Inf instead of stopping");
}

void add_data_flags(FlagTable& t) {
  t.group(FlagGroup::kData);
  t.flag("--mock-data", &TrainArgs::mock_data, "synthetic learnable token stream");
  t.option("--data-path", &TrainArgs::data_path,
           "indexed dataset prefixes (PREFIX.bin/.idx), optionally weighted: 0.3 A 0.7 B");
  t.option("--train-data-path", &TrainArgs::train_data_path, "training blend (instead of --split)");
  t.option("--valid-data-path", &TrainArgs::valid_data_path, "validation blend");
  t.option("--test-data-path", &TrainArgs::test_data_path, "test blend");
  t.option("--data-cache-path", &TrainArgs::data_cache_path, "where dataset indices are cached");
  t.option("--split", &TrainArgs::split, "train,valid,test weights");
  t.flag("--eod-mask-loss", &TrainArgs::eod_mask_loss, "no loss on predictions made from EOD");
  t.flag("--reset-position-ids", &TrainArgs::reset_position_ids, "positions restart after EOD");
  t.flag("--reset-attention-mask", &TrainArgs::reset_attention_mask,
         "tokens attend only within their document");
  t.option("--tokenizer-type", &TrainArgs::tokenizer_type)
      ->check(CLI::IsMember(data::tokenizer_types()));
  t.option("--vocab-file", &TrainArgs::vocab_file, "GPT2BPETokenizer: encoder.json");
  t.option("--merge-file", &TrainArgs::merge_file, "GPT2BPETokenizer: vocab.bpe");
  t.option("--tokenizer-model", &TrainArgs::tokenizer_model,
           "HuggingFaceTokenizer: tokenizer.json; SentencePieceTokenizer: .model");
  t.option("--tiktoken-pattern", &TrainArgs::tiktoken_pattern,
           "TikTokenizer's pre-tokenizer regex: v1 or v2 (Megatron's)")
      ->check(CLI::IsMember({"v1", "v2"}));
  t.option("--tiktoken-num-special-tokens", &TrainArgs::tiktoken_num_special_tokens,
           "TikTokenizer: ids below this are special tokens");
  t.option("--tiktoken-special-tokens", &TrainArgs::tiktoken_special_tokens,
           "TikTokenizer: the special tokens (must hold <unk> <s> </s>)");
}

void add_mesh_flags(FlagTable& t) {
  t.group(FlagGroup::kParallel);
  t.option("--tensor-model-parallel-size", &TrainArgs::tensor_model_parallel_size)
      ->check(CLI::PositiveNumber);
  t.flag("--sequence-parallel", &TrainArgs::sequence_parallel,
         "split norms, dropout and residuals along the sequence across the TP group");
  t.flag("--tp-reduce-in-16-bit", &TrainArgs::tp_reduce_in_16_bit,
         "with --bf16/--fp16, send and sum the tensor-parallel all-reduces and reduce-scatters of "
         "activations and their gradients in that type, as Megatron does: half the bytes; by "
         "default they are summed in fp32 and rounded once, so TP layouts reproduce one process");
  t.option("--pipeline-model-parallel-size", &TrainArgs::pipeline_model_parallel_size)
      ->check(CLI::PositiveNumber);
  t.option("--pipeline-schedule", &TrainArgs::pipeline_schedule,
           "gpipe, 1f1b (default) or interleaved (default with virtual stages)")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}));
  t.option("--num-layers-per-virtual-pipeline-stage", &TrainArgs::num_layers_per_virtual_stage,
           "layers per model chunk: interleaved 1F1B with several chunks per rank")
      ->check(CLI::PositiveNumber);
  t.option("--decoder-first-pipeline-num-layers", &TrainArgs::decoder_first_pipeline_num_layers,
           "layers on the first pipeline stage (uneven split)")
      ->check(CLI::NonNegativeNumber);
  t.option("--decoder-last-pipeline-num-layers", &TrainArgs::decoder_last_pipeline_num_layers,
           "layers on the last pipeline stage (uneven split)")
      ->check(CLI::NonNegativeNumber);
  t.option("--recompute-granularity", &TrainArgs::recompute_granularity,
           "full (whole layers) or selective (the attention core)")
      ->check(CLI::IsMember({"full", "selective"}));
  t.option("--recompute-method", &TrainArgs::recompute_method,
           "with full: uniform (groups of --recompute-num-layers) or block (the first N)")
      ->check(CLI::IsMember({"uniform", "block"}));
  t.option("--recompute-num-layers", &TrainArgs::recompute_num_layers,
           "with full: layers per recompute group (uniform) or recomputed layers (block)")
      ->check(CLI::PositiveNumber);
  t.option("--context-parallel-size", &TrainArgs::context_parallel_size,
           "split every sequence over this many ranks (load-balanced chunks r and 2N-1-r)")
      ->check(CLI::PositiveNumber);
  t.option("--cp-comm-type", &TrainArgs::cp_comm_type,
           "context-parallel attention: p2p (ring, the default), all_gather, a2a (Ulysses) or "
           "a2a+p2p; one value, or one per layer")
      ->check(CLI::IsMember({"p2p", "all_gather", "a2a", "a2a+p2p"}));
  t.option("--hierarchical-context-parallel-sizes", &TrainArgs::hierarchical_cp_sizes,
           "with a2a+p2p: the all-to-all size, then the ring size (product = CP)")
      ->check(CLI::PositiveNumber);
  t.option("--ds-sequence-parallel-size", &TrainArgs::ds_sequence_parallel_size,
           "Megatron-DeepSpeed's Ulysses: --context-parallel-size N with --cp-comm-type a2a")
      ->check(CLI::PositiveNumber);
  t.option("--expert-model-parallel-size", &TrainArgs::expert_model_parallel_size,
           "split each MoE layer's experts over this many ranks")
      ->check(CLI::PositiveNumber);
  t.option("--expert-tensor-parallel-size", &TrainArgs::expert_tensor_parallel_size,
           "tensor parallelism inside each expert (default and only value: the TP size)")
      ->check(CLI::PositiveNumber);
  t.flag("--print-mesh", &TrainArgs::print_mesh,
         "print every rank's coordinates and groups, then exit");
  t.option("--distributed-timeout-minutes", &TrainArgs::distributed_timeout_minutes,
           "abort the job when a communication does not complete within this time "
           "(default: TESSERA_DISTRIBUTED_TIMEOUT_SECONDS, else 10 minutes)")
      ->check(CLI::PositiveNumber);
  t.flag("--check-collectives", &TrainArgs::check_collectives,
         "compare every rank's sequence of collectives; report the first mismatch "
         "(also on with TESSERA_CHECK_COLLECTIVES=1)");
  t.option("--flight-recorder-dir", &TrainArgs::flight_recorder_dir,
           "keep every rank's last --flight-recorder-size communication operations and dump them "
           "to this directory when the watchdog ends the job or a rank crashes; read the dumps "
           "with tessera-flight (also TESSERA_FLIGHT_RECORDER_DIR)");
  t.option("--flight-recorder-size", &TrainArgs::flight_recorder_size,
           "operations the flight recorder keeps per rank")
      ->check(CLI::NonNegativeNumber);
}

void add_data_parallel_flags(FlagTable& t) {
  t.group(FlagGroup::kParallel);
  t.option("--zero-stage", &TrainArgs::zero_stage,
           "ZeRO stage: 0 (replicated), 1 (sharded optimizer), 2 (+ gradients), 3 (+ parameters)")
      ->check(CLI::Range(0, 3));
  t.flag("--use-distributed-optimizer", &TrainArgs::use_distributed_optimizer,
         "shard optimizer state over data parallel ranks (ZeRO stage 1)");
  t.flag("--overlap-grad-reduce,!--no-overlap-grad-reduce", &TrainArgs::overlap_grad_reduce,
         "reduce gradient buckets during the last micro-batch's backward (default on)");
  t.note("--overlap-grad-reduce",
         "Megatron's default is off, Tessera's on: the buckets are reduced while backward runs, "
         "with the same sums (the bits do not change), so there is no reason to wait; "
         "--no-overlap-grad-reduce turns it off");
  t.flag("--grad-reduce-in-bf16", &TrainArgs::grad_reduce_in_bf16,
         "send and sum the gradients' data-parallel reductions in bf16: half the bytes, each "
         "partial sum rounded to bf16 (gradients still accumulate in fp32)");
  t.note("--grad-reduce-in-bf16",
         "Megatron's flag makes its gradient buffer bf16, so micro-batches also accumulate in "
         "bf16; Tessera keeps accumulating in fp32 and rounds only what it sends and sums (as "
         "DeepSpeed's communication_data_type; under ZeRO 2-3, which reduce every micro-batch, the "
         "running sum is among what is sent); layouts then differ from the one-process run in "
         "the last bits of bf16");
  t.option("--ddp-bucket-size", &TrainArgs::ddp_bucket_size,
           "gradient bucket size in elements (default: max(40M, 1M x data-parallel size))")
      ->check(CLI::NonNegativeNumber);
  t.option("--stage3-prefetch-bucket-size", &TrainArgs::stage3_prefetch_bucket_size,
           "ZeRO 3: gather the next units of a pass ahead while those gathered ahead and not yet "
           "used total at most this many elements")
      ->check(CLI::NonNegativeNumber);
  t.option("--stage3-param-persistence-threshold", &TrainArgs::stage3_param_persistence_threshold,
           "ZeRO 3: units with fewer elements stay whole")
      ->check(CLI::NonNegativeNumber);
  t.option("--stage3-max-live-parameters", &TrainArgs::stage3_max_live_parameters,
           "ZeRO 3: at most this many gathered elements at any time (prefetched units give way; "
           "units in use always stay)")
      ->check(CLI::NonNegativeNumber);
}

void add_checkpoint_flags(FlagTable& t) {
  t.group(FlagGroup::kCheckpoint);
  t.option("--save", &TrainArgs::save, "checkpoint directory (sharded, any layout can load it)");
  t.option("--save-interval", &TrainArgs::save_interval, "iterations between checkpoints")
      ->check(CLI::PositiveNumber);
  t.flag("--async-save", &TrainArgs::async_save,
         "write checkpoints on a background thread while training continues");
  t.option("--keep-checkpoints", &TrainArgs::keep_checkpoints,
           "keep only the newest K checkpoints in --save (default: all)")
      ->check(CLI::PositiveNumber);
  t.flag("--no-save-optim", &TrainArgs::no_save_optim, "save weights only, no optimizer state");
  t.option("--load", &TrainArgs::load,
           "resume from a checkpoint directory (any layout), or start from a Hugging "
           "Face model directory (config.json + model.safetensors)");
  t.flag("--finetune", &TrainArgs::finetune,
         "load weights only: iteration, data position and optimizer start afresh");
  t.flag("--no-load-optim", &TrainArgs::no_load_optim, "do not load the optimizer state");
  t.flag("--no-load-rng", &TrainArgs::no_load_rng, "take the seed from --seed, not the checkpoint");
  t.option("--export-weights", &TrainArgs::export_weights,
           "write final weights (safetensors) and config.json for Hugging Face");
}

// The whole table.
void declare_flags(FlagTable& t) {
  add_model_flags(t);
  add_training_flags(t);
  add_optimizer_flags(t);
  add_precision_flags(t);
  add_data_flags(t);
  add_mesh_flags(t);
  add_data_parallel_flags(t);
  add_offload_flags(t);
  add_checkpoint_flags(t);
  add_logging_flags(t);
  add_deepspeed_and_test_flags(t);
  add_megatron_flags(t);
}

// The app's global options (not fields of TrainArgs): --config, --version, --list-flags
// (and --print-deepspeed-keys, declared in parse_arguments).
void configure_app(CLI::App& app) {
  app.set_version_flag("--version", kernels::version_line);
  app.option_defaults()->always_capture_default();
  app.config_formatter(std::make_shared<JsonConfig>());
  app.set_config("--config", "",
                 "JSON file of flags (keys without dashes); flags on the command line win");
  app.allow_config_extras(CLI::config_extras_mode::error);
}

// The table as declared against a default TrainArgs, once: what --list-flags prints, flag_name
// looks up and copy_given_model_flags applies (offsets are relative to the TrainArgs, so they
// hold for every instance).
struct Catalogue {
  std::vector<FlagInfo> rows;
  std::map<std::ptrdiff_t, std::string> names;  // by field offset
  std::vector<ModelFieldCopy> model_copies;
};
const Catalogue& catalogue() {
  static const Catalogue catalogue = [] {
    Catalogue c;
    CLI::App app;
    configure_app(app);
    TrainArgs probe;
    FlagTable table(app, probe);
    declare_flags(table);
    c.rows = table.rows();
    for (const FlagInfo& row : c.rows)
      if (row.offset >= 0) c.names.emplace(row.offset, row.name);
    c.model_copies = table.model_copies();
    return c;
  }();
  return catalogue;
}

// argparse keeps the last occurrence of a flag given twice; CLI11 appends a list flag's values
// (--data-path A --data-path B would be [A, B]). Drops the earlier occurrences of list flags
// (each with the values that follow it, up to the next "--" token) before CLI11 parses.
std::vector<std::string> keep_last_list_occurrences(int argc, const char* const* argv,
                                                    const CLI::App& app) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const auto name_of = [](const std::string& token) {
    return token.rfind("--", 0) == 0 ? token.substr(0, token.find('=')) : std::string();
  };
  std::map<std::string, size_t> last;  // list flag -> index of its last occurrence
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string name = name_of(args[i]);
    if (name.size() <= 2) continue;
    const CLI::Option* o = app.get_option_no_throw(name);
    if (o != nullptr && o->get_items_expected_max() > 1) last[name] = i;
  }
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string name = name_of(args[i]);
    const auto it = last.find(name);
    if (it == last.end() || it->second == i) {
      kept.push_back(args[i]);
      continue;
    }
    if (args[i].find('=') != std::string::npos) continue;
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) ++i;
  }
  return kept;
}

}  // namespace

int64_t TrainArgs::num_microbatches(int64_t data_parallel) const {
  return global_batch_size / (micro_batch_size * data_parallel);
}

bool parse_arguments(int argc, const char* const* argv, TrainArgs& args) {
  CLI::App app{"tessera-train: train a GPT/LLaMA-style language model", "tessera-train"};
  configure_app(app);
  bool list_flags = false, migration = false;
  app.add_flag("--list-flags", list_flags, "print every flag with its group and default, then exit")
      ->configurable(false);
  app.add_flag("--migration-table", migration,
               "print docs/migration.md's generated tables (Megatron flags by class), then exit")
      ->configurable(false);
  bool print_deepspeed_keys = false;
  app.add_flag("--print-deepspeed-keys", print_deepspeed_keys,
               "print every DeepSpeed config key (implemented / no effect / refused), then exit")
      ->configurable(false);
  FlagTable table(app, args);
  declare_flags(table);
  try {
    std::vector<std::string> kept = keep_last_list_occurrences(argc, argv, app);
    std::reverse(kept.begin(), kept.end());  // CLI11 takes the arguments last first
    app.parse(kept);
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
  if (list_flags || migration) {
    std::printf("%s", (list_flags ? flag_list() : migration_table()).c_str());
    return false;
  }
  if (print_deepspeed_keys) {
    std::printf("%s", deepspeed_key_markdown().c_str());
    return false;
  }
  table.record_given();
  apply_megatron_flags(args);
  apply_ds_sequence_parallel(args);
  if (args.deepspeed != !args.deepspeed_config.empty())
    throw Error("--deepspeed and --deepspeed_config FILE go together");
  if (!args.model_preset.empty()) {
    model::ModelConfig preset = model::preset(args.model_preset);
    copy_given_model_flags(args, preset);
    args.model = preset;
  }
  return true;
}

void copy_given_model_flags(const TrainArgs& args, model::ModelConfig& base) {
  for (const ModelFieldCopy& c : catalogue().model_copies)
    if (args.given_fields.count(c.offset)) c.copy(base, args.model);
}

std::string flag_name_at(std::ptrdiff_t offset) {
  const auto& names = catalogue().names;
  const auto it = names.find(offset);
  return it == names.end() ? std::string("(no flag)") : it->second;
}

const std::vector<FlagInfo>& flag_rows() { return catalogue().rows; }

std::string flag_list() {
  std::string out = "| group | flag | default | description |\n| --- | --- | --- | --- |\n";
  for (const FlagInfo& row : catalogue().rows) {
    std::string name = "`" + row.name + "`";
    if (!row.aliases.empty()) name += " (" + row.aliases + ")";
    std::string help = row.help;
    for (char& c : help)
      if (c == '|') c = '/';
    out += std::string("| ") + flag_group_name(row.group) + " | " + name + " | " +
           (row.default_value.empty() ? "" : "`" + row.default_value + "`") + " | " + help + " |\n";
  }
  return out;
}

data::TokenizerOptions tokenizer_options(const TrainArgs& args) {
  data::TokenizerOptions t;
  t.type = args.tokenizer_type;
  t.vocab_file = args.vocab_file;
  t.merge_file = args.merge_file;
  t.tokenizer_model = args.tokenizer_model;
  t.tiktoken_pattern = args.tiktoken_pattern;
  t.tiktoken_num_special_tokens = args.tiktoken_num_special_tokens;
  t.tiktoken_special_tokens = args.tiktoken_special_tokens;
  // Megatron's --vocab-size is NullTokenizer's and TikTokenizer's parameter.
  if (args.given(&model::ModelConfig::vocab_size)) t.vocab_size = args.model.vocab_size;
  return t;
}

std::array<double, 3> split_fractions(const std::string& given) {
  // Megatron's example scripts pass "--split '99,1,0'" as one array element, so the quotes reach
  // the program; Megatron reads the numbers out of it, and so does this.
  std::string split = given;
  if (split.size() >= 2 && (split.front() == '\'' || split.front() == '"') &&
      split.back() == split.front())
    split = split.substr(1, split.size() - 2);
  const auto bad = [&](const std::string& why) {
    return Error("--split '" + split + "': " + why +
                 " (expected up to three comma-separated weights, e.g. 969,30,1)");
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
  check_megatron_model_flags(args);
  args.model.validate_tensor_parallel(args.tensor_model_parallel_size, args.sequence_parallel);
  validate_context_parallel(args);
  if (args.bf16 && args.fp16) throw Error("--fp16 and --bf16 are mutually exclusive: pick one");
  // With virtual stages the gradients are reduced after the last micro-batch (the default then
  // logs "overlap off"); an explicit request for overlap would not be honoured.
  if (args.num_layers_per_virtual_stage > 0 && args.overlap_grad_reduce &&
      args.given(&TrainArgs::overlap_grad_reduce))
    throw Error(
        "--overlap-grad-reduce is not supported with --num-layers-per-virtual-pipeline-"
        "stage: gradients are reduced after the last micro-batch's backward (drop the "
        "flag or give --no-overlap-grad-reduce)");
  if (args.lr < 0) throw Error("--lr is required (the peak learning rate)");
  if (args.exit_signal_handler && args.save.empty())
    throw Error("--exit-signal-handler saves a checkpoint on SIGTERM: it needs --save DIR");
  if (args.train_iters == 0 && args.train_samples == 0)
    throw Error("--train-iters or --train-samples is required");
  const BatchSchedule batches = batch_schedule_of(args);
  for (int64_t batch : batches.batches())
    if (batch % (args.micro_batch_size * data_parallel) != 0)
      throw Error(std::string(batch == args.global_batch_size ? "--global-batch-size "
                              : args.rampup_batch_size.empty()
                                  ? "a batch of --step-batch-size-schedule, "
                                  : "a batch of --rampup-batch-size, ") +
                  std::to_string(batch) + " is not divisible by --micro-batch-size " +
                  std::to_string(args.micro_batch_size) + " x data-parallel size " +
                  std::to_string(data_parallel));
  if (batches.is_constant() && args.train_samples > 0 &&
      args.train_samples % args.global_batch_size != 0)
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
    throw Error(
        "--data-path and --train-data-path/--valid-data-path/--test-data-path are "
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
    throw Error(
        "--eod-mask-loss, --reset-position-ids and --reset-attention-mask need the EOD "
        "id: give --tokenizer-type");
  if (args.timeline_iteration > 0) {
    const int64_t iters =
        args.train_iters > 0 ? args.train_iters : batches.iterations_for(args.train_samples);
    if (args.timeline_iteration > iters)
      throw Error("--timeline-iteration " + std::to_string(args.timeline_iteration) +
                  " is after the last iteration (" + std::to_string(iters) + ")");
  }
  if (args.recompute_granularity == "full" &&
      (args.recompute_method.empty() || args.recompute_num_layers == 0))
    throw Error(
        "--recompute-granularity full needs --recompute-method (uniform or block) and "
        "--recompute-num-layers N");
  if (args.recompute_granularity != "full" &&
      (!args.recompute_method.empty() || args.recompute_num_layers > 0))
    throw Error(
        "--recompute-method and --recompute-num-layers go with "
        "--recompute-granularity full");
  if (args.lr_decay_style == "WSD" && args.lr_wsd_decay_iters == 0)
    throw Error("--lr-decay-style WSD needs --lr-wsd-decay-iters");
  if (args.save_interval > 0 && args.save.empty()) throw Error("--save-interval needs --save DIR");
  if ((args.async_save || args.keep_checkpoints > 0 || args.no_save_optim) && args.save.empty())
    throw Error("--async-save, --keep-checkpoints and --no-save-optim need --save DIR");
  if (args.finetune && args.load.empty() && args.pretrained_checkpoint.empty())
    throw Error("--finetune needs --load DIR (or --pretrained-checkpoint DIR)");
  if (args.exit_on_missing_checkpoint && args.load.empty())
    throw Error("--exit-on-missing-checkpoint needs --load DIR");
}

}  // namespace tessera::train
