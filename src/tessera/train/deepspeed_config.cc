#include "tessera/train/deepspeed_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "tessera/core/error.h"
#include "tessera/train/sharding.h"

namespace tessera::train {
namespace {

using json = nlohmann::json;

std::string number_str(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// One section of the file: typed access to its keys, remembering which were read so the rest
// can be reported as unknown.
class Section {
 public:
  Section(const std::string& file, const std::string& path, const json& j)
      : file_(file), path_(path), j_(j) {
    if (!j.is_object()) fail(path_.empty() ? "the file" : path_, "must be a JSON object");
  }

  bool has(const std::string& key) {
    known_.push_back(key);
    return j_.contains(key);
  }
  bool contains(const std::string& key) const { return j_.contains(key); }
  double number(const std::string& key, double fallback) {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number()) fail(name(key), "must be a number, got " + v.dump());
    return v.get<double>();
  }
  int64_t integer(const std::string& key, int64_t fallback) {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    // DeepSpeed configs often write sizes as 5e8: accept whole numbers in any notation.
    if (!v.is_number() || std::floor(v.get<double>()) != v.get<double>())
      fail(name(key), "must be a whole number, got " + v.dump());
    return static_cast<int64_t>(v.get<double>());
  }
  bool boolean(const std::string& key, bool fallback) {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) fail(name(key), "must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) fail(name(key), "must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  Section section(const std::string& key) {
    has(key);
    static const json kEmpty = json::object();
    return Section(file_, name(key), j_.contains(key) ? j_.at(key) : kEmpty);
  }
  const json& raw(const std::string& key) {
    has(key);
    return j_.at(key);
  }
  // Warnings for keys nobody asked for.
  void report_unknown(std::vector<std::string>& warnings) const {
    for (const auto& [key, value] : j_.items())
      if (std::find(known_.begin(), known_.end(), key) == known_.end())
        warnings.push_back(file_ + ": unknown key '" + name(key) + "' ignored");
  }
  std::string name(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(file_ + ": " + key + " " + what);
  }

 private:
  std::string file_, path_;
  const json& j_;
  std::vector<std::string> known_;
};

// Sets args.*field from the file (or DeepSpeed's default when the file has no such key) unless a
// flag set the field; a key the file does set must then agree with the flag.
template <typename T>
void set_unless_given(TrainArgs& args, T TrainArgs::*field, std::type_identity_t<T> value,
                      const std::string& file, const std::string& key, bool in_file = true) {
  T& target = args.*field;
  if (args.given(field)) {
    if (in_file && target != value)
      throw Error(file + ": " + key + " " + number_str(static_cast<double>(value)) +
                  " contradicts " + flag_name(field) + " " +
                  number_str(static_cast<double>(target)));
    return;
  }
  target = value;
}

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
  set_unless_given(args, &TrainArgs::micro_batch_size, mbs, file,
                      "train_micro_batch_size_per_gpu", file_mbs);
  set_unless_given(args, &TrainArgs::global_batch_size, tbs, file,
                      "train_batch_size", file_tbs);
}

void apply_zero(Section z, TrainArgs& args, std::vector<std::string>& warnings,
                const std::string& file) {
  // The stage the flags chose (--use-distributed-optimizer is stage 1); the file's, if it has one,
  // must agree with explicit flags.
  const int flags_stage = effective_zero_stage(args);
  int64_t stage = flags_stage;
  if (z.contains("stage")) {
    stage = z.integer("stage", 0);
    if (stage < 0 || stage > 3)
      z.fail(z.name("stage"), "must be 0, 1, 2 or 3, got " + std::to_string(stage));
    const bool explicit_stage = args.given(&TrainArgs::zero_stage) ||
                                args.given(&TrainArgs::use_distributed_optimizer);
    if (explicit_stage && flags_stage != stage)
      throw Error(file + ": " + z.name("stage") + " " + std::to_string(stage) +
                  " contradicts the flags' ZeRO stage " + std::to_string(flags_stage));
  } else {
    z.has("stage");
  }
  args.zero_stage = static_cast<int>(stage);
  const int64_t bucket = z.integer("reduce_bucket_size", 500'000'000);
  if (bucket <= 0) z.fail(z.name("reduce_bucket_size"), "must be > 0");
  set_unless_given(args, &TrainArgs::ddp_bucket_size, bucket, file,
                      z.name("reduce_bucket_size"), z.contains("reduce_bucket_size"));
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
  // ZeRO-Offload / ZeRO-Infinity: not in this build. A device other than "none" would change
  // where state lives and how fast the run is; running without it would misreport both.
  for (const char* key : {"offload_optimizer", "offload_param"}) {
    if (!z.contains(key)) continue;
    Section offload = z.section(key);
    const std::string device = offload.string("device", "none");
    if (device != "none")
      offload.fail(offload.name("device"),
                   "\"" + device + "\": offload is not implemented in this build (only \"none\")");
    // With device "none" DeepSpeed ignores the section's other keys (nvme_path, pin_memory, ...).
  }
  if (z.boolean("cpu_offload", false))
    z.fail(z.name("cpu_offload"), "true: offload is not implemented in this build");
  const auto stage3 = [&](const char* key, int64_t TrainArgs::*field) {
    const int64_t v = z.integer(key, args.*field);
    if (v < 0) z.fail(z.name(key), "must be >= 0");
    set_unless_given(args, field, v, file, z.name(key), z.contains(key));
  };
  stage3("stage3_prefetch_bucket_size", &TrainArgs::stage3_prefetch_bucket_size);
  stage3("stage3_param_persistence_threshold", &TrainArgs::stage3_param_persistence_threshold);
  stage3("stage3_max_live_parameters", &TrainArgs::stage3_max_live_parameters);
  z.report_unknown(warnings);
}

void apply_precision(Section& top, TrainArgs& args, std::vector<std::string>& warnings,
                     const std::string& file) {
  Section fp16 = top.section("fp16");
  if (fp16.boolean("enabled", false)) {
    args.fp16 = true;
    const double scale = fp16.number("loss_scale", 0.0);
    if (scale < 0) fp16.fail(fp16.name("loss_scale"), "must be >= 0 (0: dynamic)");
    set_unless_given(args, &TrainArgs::loss_scale, scale, file, fp16.name("loss_scale"),
                        fp16.contains("loss_scale"));
    const double power = fp16.number("initial_scale_power", 16);
    set_unless_given(args, &TrainArgs::initial_loss_scale, std::pow(2.0, power),
                        file, fp16.name("initial_scale_power") + " (as 2^power)",
                        fp16.contains("initial_scale_power"));
    set_unless_given(args, &TrainArgs::loss_scale_window,
                        fp16.integer("loss_scale_window", 1000), file,
                        fp16.name("loss_scale_window"), fp16.contains("loss_scale_window"));
    set_unless_given(args, &TrainArgs::hysteresis,
                        static_cast<int>(fp16.integer("hysteresis", 2)), file,
                        fp16.name("hysteresis"), fp16.contains("hysteresis"));
    set_unless_given(args, &TrainArgs::min_loss_scale,
                        fp16.number("min_loss_scale", 1.0), file, fp16.name("min_loss_scale"),
                        fp16.contains("min_loss_scale"));
  }
  fp16.report_unknown(warnings);
  Section bf16 = top.section("bf16");
  if (bf16.boolean("enabled", false)) args.bf16 = true;
  bf16.report_unknown(warnings);
  if (args.fp16 && args.bf16)
    throw Error(file + ": fp16 and bf16 are both enabled (with the flags): pick one");
}

void apply_optimizer(Section& top, TrainArgs& args, std::vector<std::string>& warnings,
                     const std::string& file) {
  if (!top.has("optimizer")) return;
  Section opt = top.section("optimizer");
  std::string type = opt.string("type", "");
  std::string lower = type;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower != "adam" && lower != "adamw")
    opt.fail(opt.name("type"), "'" + type + "' is not supported (Adam or AdamW)");
  Section params = opt.section("params");
  if (!params.boolean("adam_w_mode", true))
    params.fail(params.name("adam_w_mode"), "false (L2-coupled Adam) is not supported");
  set_unless_given(args, &TrainArgs::lr, params.number("lr", 1e-3), file, params.name("lr"),
                      params.contains("lr"));
  double b1 = 0.9, b2 = 0.999;
  if (params.has("betas")) {
    const json& betas = params.raw("betas");
    if (!betas.is_array() || betas.size() != 2 || !betas[0].is_number() || !betas[1].is_number())
      params.fail(params.name("betas"), "must be two numbers, got " + betas.dump());
    b1 = betas[0].get<double>();
    b2 = betas[1].get<double>();
  }
  const bool betas = params.contains("betas");
  set_unless_given(args, &TrainArgs::adam_beta1, b1, file, params.name("betas[0]"),
                      betas);
  set_unless_given(args, &TrainArgs::adam_beta2, b2, file, params.name("betas[1]"),
                      betas);
  set_unless_given(args, &TrainArgs::adam_eps, params.number("eps", 1e-8), file,
                      params.name("eps"), params.contains("eps"));
  set_unless_given(args, &TrainArgs::weight_decay, params.number("weight_decay", 0.0),
                      file, params.name("weight_decay"), params.contains("weight_decay"));
  if (args.given(&TrainArgs::optimizer) && args.optimizer == "sgd")
    throw Error(file + ": optimizer " + type + " contradicts " +
                flag_name(&TrainArgs::optimizer) + " sgd");
  args.optimizer = "adam";
  params.report_unknown(warnings);
  opt.report_unknown(warnings);
}

void apply_scheduler(Section& top, TrainArgs& args, std::vector<std::string>& warnings,
                     const std::string& file) {
  if (!top.has("scheduler")) return;
  Section sched = top.section("scheduler");
  const auto schedule_flag_given = [&]() -> std::string {
    if (args.given(&TrainArgs::lr_decay_style)) return flag_name(&TrainArgs::lr_decay_style);
    if (args.given(&TrainArgs::lr_warmup_iters)) return flag_name(&TrainArgs::lr_warmup_iters);
    if (args.given(&TrainArgs::lr_warmup_fraction))
      return flag_name(&TrainArgs::lr_warmup_fraction);
    if (args.given(&TrainArgs::lr_decay_iters)) return flag_name(&TrainArgs::lr_decay_iters);
    if (args.given(&TrainArgs::min_lr)) return flag_name(&TrainArgs::min_lr);
    return "";
  };
  if (const std::string flag = schedule_flag_given(); !flag.empty())
    throw Error(file + ": scheduler and " + flag + " both set the learning-rate schedule");
  optim::DeepSpeedScheduleOptions o;
  o.type = optim::parse_deepspeed_schedule_type(sched.string("type", ""));
  Section p = sched.section("params");
  o.warmup_num_steps = p.integer("warmup_num_steps", o.warmup_num_steps);
  const std::string warmup_type = p.string("warmup_type", "log");
  if (warmup_type != "log" && warmup_type != "linear")
    p.fail(p.name("warmup_type"), "must be \"log\" or \"linear\", got \"" + warmup_type + "\"");
  o.log_warmup = warmup_type == "log";
  if (o.type == optim::DeepSpeedScheduleType::kWarmupCosineLR) {
    o.total_num_steps = p.integer("total_num_steps", 0);
    o.warmup_min_ratio = p.number("warmup_min_ratio", o.warmup_min_ratio);
    o.cos_min_ratio = p.number("cos_min_ratio", o.cos_min_ratio);
    if (args.lr < 0)
      throw Error(file + ": scheduler WarmupCosineLR scales the optimizer's learning rate: give "
                         "optimizer.params.lr or --lr");
    o.base_lr = args.lr;
  } else {
    o.warmup_min_lr = p.number("warmup_min_lr", o.warmup_min_lr);
    o.warmup_max_lr = p.number("warmup_max_lr", o.warmup_max_lr);
    if (o.type == optim::DeepSpeedScheduleType::kWarmupDecayLR)
      o.total_num_steps = p.integer("total_num_steps", 0);
    // These schedulers set the learning rate outright; --lr is then not needed.
    if (args.lr < 0) args.lr = o.warmup_max_lr;
  }
  try {
    optim::DeepSpeedLRSchedule check(o);
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
  args.deepspeed_schedule = o;
  p.report_unknown(warnings);
  sched.report_unknown(warnings);
}

}  // namespace

// DeepSpeed's "tensorboard" block ({enabled, output_path, job_name}; its monitor writes to
// output_path/job_name, job_name defaulting to "DeepSpeedJobName") selects the TensorBoard writer
// --tensorboard-dir selects. A directory given by the flag wins only if the two agree.
void apply_tensorboard(Section tb, TrainArgs& args, std::vector<std::string>& warnings,
                       const std::string& file) {
  const bool enabled = tb.boolean("enabled", false);
  const std::string dir = (std::filesystem::path(tb.string("output_path", "")) /
                           tb.string("job_name", "DeepSpeedJobName"))
                              .string();
  tb.report_unknown(warnings);
  if (!enabled) return;
  if (args.given(&TrainArgs::tensorboard_dir) && args.tensorboard_dir != dir)
    throw Error(file + ": tensorboard.output_path/job_name " + dir + " contradicts " +
                flag_name(&TrainArgs::tensorboard_dir) + " " + args.tensorboard_dir);
  args.tensorboard_dir = dir;
}

std::vector<std::string> apply_deepspeed_config(TrainArgs& args, int64_t data_parallel) {
  const std::string& file = args.deepspeed_config;
  std::ifstream in(file);
  if (!in) throw Error("--deepspeed_config " + file + ": cannot open the file");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw Error(file + ": not valid JSON (" + one_line(e.what()) + ")");
  }
  std::vector<std::string> warnings;
  Section top(file, "", j);
  apply_batch(top, args, data_parallel, file);
  apply_zero(top.section("zero_optimization"), args, warnings, file);
  apply_precision(top, args, warnings, file);
  apply_optimizer(top, args, warnings, file);  // before the scheduler: WarmupCosineLR uses lr
  apply_scheduler(top, args, warnings, file);
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
  apply_tensorboard(top.section("tensorboard"), args, warnings, file);
  top.report_unknown(warnings);
  return warnings;
}

}  // namespace tessera::train
