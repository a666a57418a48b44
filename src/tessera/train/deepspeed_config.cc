#include "tessera/train/deepspeed_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "tessera/core/error.h"
#include "tessera/train/deepspeed_auto.h"
#include "tessera/train/deepspeed_keys.h"
#include "tessera/train/deepspeed_section.h"
#include "tessera/train/sharding.h"

namespace tessera::train {
namespace {

using deepspeed::json;
using deepspeed::Section;
using deepspeed::set_unless_given;

void apply_batch(Section& top, TrainArgs& args, int64_t dp, const std::string& file) {
  const bool file_tbs = top.has("train_batch_size"),
             file_mbs = top.has("train_micro_batch_size_per_gpu"),
             has_gas = top.has("gradient_accumulation_steps");
  int64_t tbs = top.integer("train_batch_size", 0),
          mbs = top.integer("train_micro_batch_size_per_gpu", 0),
          gas = top.integer("gradient_accumulation_steps", 0);
  if (!file_tbs && !file_mbs && !has_gas) return;  // the flags decide
  // An explicit flag counts as one of the two values that determine the third.
  const bool flag_gbs = args.given(&TrainArgs::global_batch_size),
             flag_mbs = args.given(&TrainArgs::micro_batch_size);
  if (!file_tbs && flag_gbs) tbs = args.global_batch_size;
  if (!file_mbs && flag_mbs) mbs = args.micro_batch_size;
  const bool has_tbs = file_tbs || flag_gbs, has_mbs = file_mbs || flag_mbs;
  for (const auto& [key, v, present] : {std::tuple{"train_batch_size", tbs, has_tbs},
                                        std::tuple{"train_micro_batch_size_per_gpu", mbs, has_mbs},
                                        std::tuple{"gradient_accumulation_steps", gas, has_gas}})
    if (present && v <= 0)
      throw Error(file + ": " + key + " must be > 0, got " + std::to_string(v));
  const std::string dp_str = " x data-parallel size " + std::to_string(dp);
  if (has_tbs && has_mbs && has_gas) {
    if (tbs != mbs * gas * dp)
      throw Error(file + ": train_batch_size " + std::to_string(tbs) +
                  " != train_micro_batch_size_per_gpu " + std::to_string(mbs) +
                  " x gradient_accumulation_steps " + std::to_string(gas) + dp_str);
  } else if (has_tbs && has_mbs) {
    if (tbs % (mbs * dp) != 0)
      throw Error(file + ": train_batch_size " + std::to_string(tbs) +
                  " is not divisible by train_micro_batch_size_per_gpu " + std::to_string(mbs) +
                  dp_str);
  } else if (has_tbs && has_gas) {
    if (tbs % (gas * dp) != 0)
      throw Error(file + ": train_batch_size " + std::to_string(tbs) +
                  " is not divisible by gradient_accumulation_steps " + std::to_string(gas) +
                  dp_str);
    mbs = tbs / (gas * dp);
  } else if (has_mbs && has_gas) {
    tbs = mbs * gas * dp;
  } else if (has_tbs) {
    if (tbs % dp != 0)
      throw Error(file + ": train_batch_size " + std::to_string(tbs) + " is not divisible by" +
                  dp_str.substr(3));
    mbs = tbs / dp;
  } else if (has_mbs) {
    tbs = mbs * dp;
  } else {
    throw Error(file +
                ": gradient_accumulation_steps needs train_batch_size or "
                "train_micro_batch_size_per_gpu");
  }
  set_unless_given(args, &TrainArgs::micro_batch_size, mbs, file, "train_micro_batch_size_per_gpu",
                   file_mbs);
  set_unless_given(args, &TrainArgs::global_batch_size, tbs, file, "train_batch_size", file_tbs);
}

void apply_zero(Section z, Section& top, TrainArgs& args, const std::string& file) {
  // The stage the flags chose (--use-distributed-optimizer is stage 1); the file's, if it has one,
  // must agree with explicit flags.
  const int flags_stage = effective_zero_stage(args);
  int64_t stage = flags_stage;
  if (z.contains("stage")) {
    stage = z.integer("stage", 0);
    if (stage < 0 || stage > 3)
      z.fail(z.name("stage"), "must be 0, 1, 2 or 3, got " + std::to_string(stage));
    const bool explicit_stage =
        args.given(&TrainArgs::zero_stage) || args.given(&TrainArgs::use_distributed_optimizer);
    if (explicit_stage && flags_stage != stage)
      throw Error(file + ": " + z.name("stage") + " " + std::to_string(stage) +
                  " contradicts the flags' ZeRO stage " + std::to_string(flags_stage));
  } else {
    z.has("stage");
  }
  args.zero_stage = static_cast<int>(stage);
  const int64_t bucket = z.integer("reduce_bucket_size", 500'000'000);
  if (bucket <= 0) z.fail(z.name("reduce_bucket_size"), "must be > 0");
  set_unless_given(args, &TrainArgs::ddp_bucket_size, bucket, file, z.name("reduce_bucket_size"),
                   z.contains("reduce_bucket_size"));
  bool overlap = z.boolean("overlap_comm", stage == 3);
  if (args.given(&TrainArgs::overlap_grad_reduce)) {
    if (z.contains("overlap_comm") && args.overlap_grad_reduce != overlap)
      throw Error(file + ": " + z.name("overlap_comm") + " " + (overlap ? "true" : "false") +
                  " contradicts " + (args.overlap_grad_reduce ? "--" : "--no-") +
                  flag_name(&TrainArgs::overlap_grad_reduce).substr(2));
  } else {
    args.overlap_grad_reduce = overlap;
  }
  // Settings Tessera cannot honour are refused, never ignored: gradients always live in one
  // contiguous buffer, and parameters are all-gathered per gradient bucket (stages 1-2) or per
  // unit (stage 3), so an all-gather bucket other than the reduce bucket would not take effect.
  if (!z.boolean("contiguous_gradients", true))
    z.fail(z.name("contiguous_gradients"),
           "false is not supported: Tessera's gradients are always one contiguous buffer "
           "(set it true or remove it)");
  // Stages 1-2 gather per reduce bucket; stage 0 gathers nothing and stage 3 per unit, where the
  // setting has no counterpart and is accepted as DeepSpeed's own stage 3 accepts it.
  if (z.contains("allgather_bucket_size")) {
    const int64_t gather = z.integer("allgather_bucket_size", 0);
    if (gather <= 0) z.fail(z.name("allgather_bucket_size"), "must be > 0");
    if ((stage == 1 || stage == 2) && args.ddp_bucket_size > 0 && gather != args.ddp_bucket_size)
      z.fail(z.name("allgather_bucket_size"),
             std::to_string(gather) + " differs from the reduce bucket size " +
                 std::to_string(args.ddp_bucket_size) +
                 ": at ZeRO stages 1-2 Tessera all-gathers parameters per gradient bucket, so "
                 "the two must be equal (or leave allgather_bucket_size out)");
  } else {
    z.has("allgather_bucket_size");
  }
  const auto stage3 = [&](const char* key, int64_t TrainArgs::*field) {
    const int64_t v = z.integer(key, args.*field);
    if (v < 0) z.fail(z.name(key), "must be >= 0");
    set_unless_given(args, field, v, file, z.name(key), z.contains(key));
  };
  stage3("stage3_prefetch_bucket_size", &TrainArgs::stage3_prefetch_bucket_size);
  stage3("stage3_param_persistence_threshold", &TrainArgs::stage3_param_persistence_threshold);
  stage3("stage3_max_live_parameters", &TrainArgs::stage3_max_live_parameters);
  deepspeed::apply_offload(z, top, args);
  z.check_read();
}

void apply_precision(Section& top, TrainArgs& args, const std::string& file) {
  Section fp16 = top.section("fp16");
  // Read whether or not fp16 is enabled, so that a bad value is an error either way.
  const bool fp16_on = fp16.boolean("enabled", false);
  const double scale = fp16.number("loss_scale", 0.0);
  if (scale < 0) fp16.fail(fp16.name("loss_scale"), "must be >= 0 (0: dynamic)");
  const double power = fp16.number("initial_scale_power", 16);
  const int64_t window = fp16.integer("loss_scale_window", 1000);
  const int64_t hysteresis = fp16.integer("hysteresis", 2);
  const double min_scale = fp16.number("min_loss_scale", 1.0);
  if (fp16_on) {
    args.fp16 = true;
    set_unless_given(args, &TrainArgs::loss_scale, scale, file, fp16.name("loss_scale"),
                     fp16.contains("loss_scale"));
    set_unless_given(args, &TrainArgs::initial_loss_scale, std::pow(2.0, power), file,
                     fp16.name("initial_scale_power") + " (as 2^power)",
                     fp16.contains("initial_scale_power"));
    set_unless_given(args, &TrainArgs::loss_scale_window, window, file,
                     fp16.name("loss_scale_window"), fp16.contains("loss_scale_window"));
    set_unless_given(args, &TrainArgs::hysteresis, static_cast<int>(hysteresis), file,
                     fp16.name("hysteresis"), fp16.contains("hysteresis"));
    set_unless_given(args, &TrainArgs::min_loss_scale, min_scale, file, fp16.name("min_loss_scale"),
                     fp16.contains("min_loss_scale"));
  }
  fp16.check_read();
  // "bfloat16" is the spelling DeepSpeed accepted before "bf16" and still reads when "bf16" is
  // absent (deepspeed/runtime/config.py); giving both is ambiguous, so it is refused.
  if (top.contains("bf16") && top.contains("bfloat16"))
    throw Error(file + ": both bf16 and its legacy spelling bfloat16 are given: keep one");
  for (const char* key : {"bf16", "bfloat16"}) {
    Section bf16 = top.section(key);
    if (bf16.boolean("enabled", false)) args.bf16 = true;
    bf16.check_read();
  }
  if (args.fp16 && args.bf16)
    throw Error(file + ": fp16 and bf16 are both enabled (with the flags): pick one");
}

// communication_data_type: the type the gradients' reductions send and sum in (DeepSpeed casts
// the gradients to it for the reduction and back; Tessera rounds each piece it sends, and every
// partial sum, to it). Absent: fp32, with a line in `info` when DeepSpeed would have used the
// model's 16-bit type. data_types.grad_accum_dtype: Tessera accumulates gradients in fp32 whatever
// the compute dtype, so "fp32" is what it does and the lower precisions are refused rather than
// run in fp32 under a label that says otherwise.
void apply_gradient_dtypes(Section& top, TrainArgs& args, const std::string& file,
                           std::vector<std::string>& info) {
  const auto dtype_of = [](Section& s, const char* key) {
    const std::string dtype = s.string(key, "fp32");
    if (dtype != "fp32" && dtype != "fp16" && dtype != "bf16")
      s.fail(s.name(key), "must be \"fp32\", \"fp16\" or \"bf16\", got \"" + dtype + "\"");
    return dtype;
  };
  const std::string comm = dtype_of(top, "communication_data_type");
  const DType reduce = comm == "bf16" ? DType::kBF16 : comm == "fp16" ? DType::kF16 : DType::kF32;
  if (args.grad_reduce_in_bf16 && top.contains("communication_data_type") && reduce != DType::kBF16)
    throw Error(file + ": " + top.name("communication_data_type") + " \"" + comm +
                "\" contradicts --grad-reduce-in-bf16");
  args.communication_data_type = reduce;
  // DeepSpeed's default is the model's 16-bit type; Tessera's stays fp32 (exact sums). Said once,
  // so that a migrated config's slower reductions are not a surprise.
  if (!top.contains("communication_data_type") && !args.grad_reduce_in_bf16 &&
      (args.fp16 || args.bf16))
    info.push_back(std::string("communication_data_type: absent, so gradients are reduced in fp32 "
                               "(DeepSpeed would reduce them in ") +
                   (args.bf16 ? "bf16" : "fp16") + "); set it to \"" +
                   (args.bf16 ? "bf16" : "fp16") + "\" for DeepSpeed's half-size reductions");
  Section types = top.section("data_types");
  if (dtype_of(types, "grad_accum_dtype") != "fp32")
    types.fail(types.name("grad_accum_dtype"),
               "\"" + types.string("grad_accum_dtype", "fp32") +
                   "\" is not supported: Tessera accumulates gradients in fp32 whatever the "
                   "compute dtype (only \"fp32\")");
  types.check_read();
  // No effect (deepspeed_keys.cc says why), but a factor DeepSpeed would reject is still bad input.
  if (top.number("gradient_predivide_factor", 1.0) <= 0)
    top.fail("gradient_predivide_factor", "must be > 0");
}

// DeepSpeed's activation_checkpointing block configures deepspeed.checkpointing, which does
// nothing until the model code calls it on its layers; Tessera's model is that code, so the block
// turns on full recomputation of every layer in uniform groups (see deepspeed_config.h).
void apply_activation_checkpointing(Section& top, TrainArgs& args, std::vector<std::string>& info) {
  if (!top.has("activation_checkpointing")) return;
  Section ac = top.section("activation_checkpointing");
  const std::string file = top.file();
  const bool has_n = ac.contains("number_checkpoints");
  const int64_t n = ac.integer("number_checkpoints", 0);
  if (has_n && n <= 0) ac.fail(ac.name("number_checkpoints"), "must be > 0");
  const int64_t pp = std::max(1, args.pipeline_model_parallel_size);
  const int64_t layers_per_rank = (args.model.num_layers + pp - 1) / pp;
  const int group =
      has_n ? static_cast<int>(std::max<int64_t>(1, (layers_per_rank + n - 1) / n)) : 1;
  if (args.given(&TrainArgs::recompute_granularity) && args.recompute_granularity != "full")
    throw Error(file +
                ": activation_checkpointing turns on full recomputation, which contradicts " +
                flag_name(&TrainArgs::recompute_granularity) + " " + args.recompute_granularity);
  args.recompute_granularity = "full";
  if (!args.given(&TrainArgs::recompute_method)) args.recompute_method = "uniform";
  if (!args.given(&TrainArgs::recompute_num_layers)) args.recompute_num_layers = group;
  if (has_n && (args.recompute_method != "uniform" || args.recompute_num_layers != group))
    throw Error(file + ": " + ac.name("number_checkpoints") + " " + std::to_string(n) +
                " (uniform groups of " + std::to_string(group) + " layers) contradicts " +
                flag_name(&TrainArgs::recompute_method) + " " + args.recompute_method + " " +
                flag_name(&TrainArgs::recompute_num_layers) + " " +
                std::to_string(args.recompute_num_layers));
  info.push_back("activation_checkpointing: --recompute-granularity full --recompute-method " +
                 args.recompute_method + " --recompute-num-layers " +
                 std::to_string(args.recompute_num_layers));
  ac.check_read();
}

// DeepSpeed's "tensorboard" block ({enabled, output_path, job_name}; its monitor writes to
// output_path/job_name, job_name defaulting to "DeepSpeedJobName") selects the TensorBoard writer
// --tensorboard-dir selects. A directory given by the flag wins only if the two agree.
void apply_tensorboard(Section tb, TrainArgs& args, const std::string& file) {
  const bool enabled = tb.boolean("enabled", false);
  const std::string dir = (std::filesystem::path(tb.string("output_path", "")) /
                           tb.string("job_name", "DeepSpeedJobName"))
                              .string();
  tb.check_read();
  if (!enabled) return;
  if (args.given(&TrainArgs::tensorboard_dir) && args.tensorboard_dir != dir)
    throw Error(file + ": tensorboard.output_path/job_name " + dir + " contradicts " +
                flag_name(&TrainArgs::tensorboard_dir) + " " + args.tensorboard_dir);
  args.tensorboard_dir = dir;
}

}  // namespace

DeepSpeedApplied apply_deepspeed_config(TrainArgs& args, int64_t data_parallel) {
  const std::string& file = args.deepspeed_config;
  std::ifstream in(file);
  if (!in) throw Error("--deepspeed_config " + file + ": cannot open the file");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw Error(file + ": not valid JSON (" + one_line(e.what()) + ")");
  }
  if (!j.is_object()) throw Error(file + ": the file must hold a JSON object");
  DeepSpeedApplied out;
  // "auto" first (it may fill refused keys with their inert values), then every key is
  // classified before any is applied: an unknown or refused key stops the run before it starts.
  ResolvedAuto autos = resolve_deepspeed_auto(j, args, data_parallel, file);
  out.info = std::move(autos.lines);
  out.warnings = classify_deepspeed_keys(j, file);
  Section top(file, "", j);
  apply_batch(top, args, data_parallel, file);
  apply_zero(top.section("zero_optimization"), top, args, file);
  apply_precision(top, args, file);
  apply_gradient_dtypes(top, args, file, out.info);
  deepspeed::apply_optimizer(top, args);  // before the scheduler: WarmupCosineLR uses lr
  deepspeed::apply_scheduler(top, args, autos.paths, out.warnings);
  apply_activation_checkpointing(top, args, out.info);
  const double clip = top.number("gradient_clipping", 0.0);
  if (clip < 0) top.fail("gradient_clipping", "must be >= 0");
  set_unless_given(args, &TrainArgs::clip_grad, clip, file, "gradient_clipping",
                   top.contains("gradient_clipping"));
  const int64_t steps = top.integer("steps_per_print", 10);
  if (steps <= 0) top.fail("steps_per_print", "must be > 0");
  set_unless_given(args, &TrainArgs::log_interval, steps, file, "steps_per_print",
                   top.contains("steps_per_print"));
  // DeepSpeed's per-phase timers are the log's wall-clock breakdown (--timing-log-level 1).
  if (top.boolean("wall_clock_breakdown", false)) {
    if (args.given(&TrainArgs::timing_log_level) && args.timing_log_level == 0)
      throw Error(file + ": wall_clock_breakdown true contradicts " +
                  flag_name(&TrainArgs::timing_log_level) + " 0");
    args.timing_log_level = std::max(args.timing_log_level, 1);
  }
  apply_tensorboard(top.section("tensorboard"), args, file);
  top.check_read();
  return out;
}

void print_deepspeed_report(const DeepSpeedApplied& applied) {
  for (const std::string& w : applied.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  for (const std::string& line : applied.info)
    std::printf("> deepspeed config: %s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace tessera::train
