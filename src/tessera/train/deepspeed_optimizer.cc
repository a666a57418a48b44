// A DeepSpeed config's "optimizer" and "scheduler" blocks mapped onto tessera-train's arguments
// (deepspeed_config.h lists the mapping; deepspeed_keys.h classifies every parameter).
#include <algorithm>

#include "tessera/optim/deepspeed_lr_schedule.h"
#include "tessera/train/deepspeed_section.h"

namespace tessera::train::deepspeed {

void apply_optimizer(Section& top, TrainArgs& args) {
  if (!top.has("optimizer")) return;
  Section opt = top.section("optimizer");
  const std::string type = opt.string("type", "");
  std::string lower = type;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower != "adam" && lower != "adamw" && lower != "sgd")
    opt.fail(opt.name("type"), "'" + type + "' is not supported (Adam, AdamW or SGD)");
  const std::string kind = lower == "sgd" ? "sgd" : "adam";
  Section params = opt.section("params");
  const std::string file = top.file();
  // The parameters of the constructor DeepSpeed hands them to (FusedAdam / torch.optim.AdamW,
  // torch.optim.SGD); the key table has already refused the unsupported values.
  if (kind == "sgd")
    params.only({"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize", "foreach",
                 "fused", "differentiable"},
                type);
  else
    params.only({"lr", "betas", "eps", "weight_decay", "adam_w_mode", "torch_adam", "amsgrad",
                 "bias_correction", "foreach", "fused", "capturable", "differentiable", "maximize",
                 "set_grad_none"},
                type);
  if (args.given(&TrainArgs::optimizer) && (args.optimizer == "sgd") != (kind == "sgd"))
    throw Error(file + ": optimizer " + type + " contradicts " + flag_name(&TrainArgs::optimizer) +
                " " + args.optimizer);
  args.optimizer = kind;
  set_unless_given(args, &TrainArgs::lr, params.number("lr", 1e-3), file, params.name("lr"),
                   params.contains("lr"));
  set_unless_given(args, &TrainArgs::weight_decay, params.number("weight_decay", 0.0), file,
                   params.name("weight_decay"), params.contains("weight_decay"));
  if (kind == "sgd") {
    // torch.optim.SGD's momentum defaults to 0 (Tessera's --sgd-momentum to Megatron's 0.9).
    const double momentum = params.number("momentum", 0.0);
    if (momentum < 0 || momentum >= 1) params.fail(params.name("momentum"), "must be in [0, 1)");
    set_unless_given(args, &TrainArgs::sgd_momentum, momentum, file, params.name("momentum"),
                     params.contains("momentum"));
    params.check_read();
    opt.check_read();
    return;
  }
  if (!params.boolean("adam_w_mode", true))
    params.fail(params.name("adam_w_mode"), "false (L2-coupled Adam) is not supported");
  double b1 = 0.9, b2 = 0.999;
  if (params.has("betas")) {
    const json& betas = params.raw("betas");
    if (!betas.is_array() || betas.size() != 2 || !betas[0].is_number() || !betas[1].is_number())
      params.fail(params.name("betas"), "must be two numbers, got " + betas.dump());
    b1 = betas[0].get<double>();
    b2 = betas[1].get<double>();
  }
  const bool betas = params.contains("betas");
  set_unless_given(args, &TrainArgs::adam_beta1, b1, file, params.name("betas[0]"), betas);
  set_unless_given(args, &TrainArgs::adam_beta2, b2, file, params.name("betas[1]"), betas);
  set_unless_given(args, &TrainArgs::adam_eps, params.number("eps", 1e-8), file, params.name("eps"),
                   params.contains("eps"));
  params.check_read();
  opt.check_read();
}

void apply_scheduler(Section& top, TrainArgs& args, const std::set<std::string>& autos,
                     std::vector<std::string>& warnings) {
  if (!top.has("scheduler")) return;
  Section sched = top.section("scheduler");
  const std::string file = top.file();
  // A schedule flag contradicts the scheduler block, unless the block asked for its value with
  // "auto" (Hugging Face's way of taking the warmup and length from the trainer's arguments).
  const auto schedule_flag_given = [&]() -> std::string {
    const bool warmup_auto = autos.count("scheduler.params.warmup_num_steps") > 0;
    const bool total_auto = autos.count("scheduler.params.total_num_steps") > 0;
    if (args.given(&TrainArgs::lr_decay_style)) return flag_name(&TrainArgs::lr_decay_style);
    if (args.given(&TrainArgs::lr_warmup_iters) && !warmup_auto)
      return flag_name(&TrainArgs::lr_warmup_iters);
    if (args.given(&TrainArgs::lr_warmup_fraction) && !warmup_auto)
      return flag_name(&TrainArgs::lr_warmup_fraction);
    if (args.given(&TrainArgs::lr_decay_iters) && !total_auto)
      return flag_name(&TrainArgs::lr_decay_iters);
    if (args.given(&TrainArgs::min_lr)) return flag_name(&TrainArgs::min_lr);
    return "";
  };
  if (const std::string flag = schedule_flag_given(); !flag.empty())
    throw Error(file + ": scheduler and " + flag + " both set the learning-rate schedule");
  optim::DeepSpeedScheduleOptions o;
  const std::string type = sched.string("type", "");
  try {
    o.type = optim::parse_deepspeed_schedule_type(type);
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
  Section p = sched.section("params");
  // DeepSpeed passes params to the scheduler's constructor: another scheduler's parameter is an
  // error there too. last_batch_iteration is classified (and refused unless -1) by the key table.
  using T = optim::DeepSpeedScheduleType;
  switch (o.type) {
    case T::kWarmupLR:
      p.only({"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
              "last_batch_iteration"},
             type);
      break;
    case T::kWarmupDecayLR:
      p.only({"total_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
              "warmup_type", "last_batch_iteration"},
             type);
      break;
    case T::kWarmupCosineLR:
      p.only({"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio",
              "warmup_type", "last_batch_iteration"},
             type);
      break;
    case T::kOneCycle:
      p.only({"cycle_min_lr", "cycle_max_lr", "decay_lr_rate", "cycle_first_step_size",
              "cycle_second_step_size", "cycle_first_stair_count", "cycle_second_stair_count",
              "decay_step_size", "cycle_momentum", "cycle_min_mom", "cycle_max_mom",
              "decay_mom_rate", "last_batch_iteration"},
             type);
      break;
  }
  if (o.type == T::kOneCycle) {
    for (const char* key : {"cycle_min_lr", "cycle_max_lr"})
      if (!p.contains(key)) p.fail(p.name(key), "is required by OneCycle");
    o.cycle_min_lr = p.number("cycle_min_lr", 0.0);
    o.cycle_max_lr = p.number("cycle_max_lr", 0.0);
    o.decay_lr_rate = p.number("decay_lr_rate", o.decay_lr_rate);
    o.cycle_first_step_size = p.integer("cycle_first_step_size", o.cycle_first_step_size);
    o.cycle_second_step_size = p.integer("cycle_second_step_size", o.cycle_second_step_size);
    o.decay_step_size = p.integer("decay_step_size", o.decay_step_size);
    o.cycle_momentum = p.boolean("cycle_momentum", o.cycle_momentum);
    o.cycle_min_mom = p.number("cycle_min_mom", o.cycle_min_mom);
    o.cycle_max_mom = p.number("cycle_max_mom", o.cycle_max_mom);
    o.decay_mom_rate = p.number("decay_mom_rate", o.decay_mom_rate);
    if (o.cycle_momentum && args.optimizer == "sgd") {
      // DeepSpeed's OneCycle cycles "betas" only and turns itself off (with a warning) for an
      // optimizer without them, such as torch.optim.SGD.
      warnings.push_back(file + ": " + p.name("cycle_momentum") +
                         " true has no effect with SGD: DeepSpeed's OneCycle cycles Adam's betas "
                         "only and turns momentum cycling off for SGD, as Tessera does");
      o.cycle_momentum = false;
    }
    // OneCycle sets the rate outright; --lr is then not needed.
    if (args.lr < 0) args.lr = o.cycle_max_lr;
  } else {
    o.warmup_num_steps = p.integer("warmup_num_steps", o.warmup_num_steps);
    const std::string warmup_type = p.string("warmup_type", "log");
    if (warmup_type != "log" && warmup_type != "linear")
      p.fail(p.name("warmup_type"), "must be \"log\" or \"linear\", got \"" + warmup_type + "\"");
    o.log_warmup = warmup_type == "log";
  }
  if (o.type == T::kWarmupCosineLR) {
    o.total_num_steps = p.integer("total_num_steps", 0);
    o.warmup_min_ratio = p.number("warmup_min_ratio", o.warmup_min_ratio);
    o.cos_min_ratio = p.number("cos_min_ratio", o.cos_min_ratio);
    if (args.lr < 0)
      throw Error(file +
                  ": scheduler WarmupCosineLR scales the optimizer's learning rate: give "
                  "optimizer.params.lr or --lr");
    o.base_lr = args.lr;
  } else if (o.type != T::kOneCycle) {
    o.warmup_min_lr = p.number("warmup_min_lr", o.warmup_min_lr);
    o.warmup_max_lr = p.number("warmup_max_lr", o.warmup_max_lr);
    if (o.type == T::kWarmupDecayLR) o.total_num_steps = p.integer("total_num_steps", 0);
    // These schedulers set the learning rate outright; --lr is then not needed.
    if (args.lr < 0) args.lr = o.warmup_max_lr;
  }
  try {
    optim::DeepSpeedLRSchedule check(o);
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
  args.deepspeed_schedule = o;
  p.check_read();
  sched.check_read();
}

}  // namespace tessera::train::deepspeed
