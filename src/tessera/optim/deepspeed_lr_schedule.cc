#include "tessera/optim/deepspeed_lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tessera/core/error.h"

namespace tessera::optim {

DeepSpeedScheduleType parse_deepspeed_schedule_type(const std::string& name) {
  if (name == "WarmupLR") return DeepSpeedScheduleType::kWarmupLR;
  if (name == "WarmupDecayLR") return DeepSpeedScheduleType::kWarmupDecayLR;
  if (name == "WarmupCosineLR") return DeepSpeedScheduleType::kWarmupCosineLR;
  if (name == "OneCycle") return DeepSpeedScheduleType::kOneCycle;
  if (name == "LRRangeTest")
    throw Error(
        "scheduler.type: 'LRRangeTest' is not supported: a learning-rate range test is "
        "not implemented (WarmupLR, WarmupDecayLR, WarmupCosineLR or OneCycle)");
  throw Error("scheduler.type: '" + name +
              "' is not supported (WarmupLR, WarmupDecayLR, WarmupCosineLR or OneCycle)");
}

DeepSpeedLRSchedule::DeepSpeedLRSchedule(const DeepSpeedScheduleOptions& options)
    : o_(options), warmup_(std::max<int64_t>(2, options.warmup_num_steps)) {
  if (o_.warmup_min_lr < 0 || o_.warmup_max_lr < 0 || o_.base_lr < 0)
    throw Error("scheduler.params: learning rates must be >= 0");
  if (o_.warmup_num_steps < 0) throw Error("scheduler.params.warmup_num_steps must be >= 0");
  if (o_.type == DeepSpeedScheduleType::kOneCycle) {
    if (o_.cycle_second_step_size < 0) o_.cycle_second_step_size = o_.cycle_first_step_size;
    if (o_.cycle_min_lr < 0 || o_.cycle_max_lr < 0)
      throw Error("scheduler.params: cycle_min_lr and cycle_max_lr must be >= 0");
    if (o_.cycle_first_step_size <= 0 || o_.cycle_second_step_size <= 0)
      throw Error("scheduler.params: cycle_first_step_size and cycle_second_step_size must be > 0");
    if (o_.decay_step_size < 0) throw Error("scheduler.params.decay_step_size must be >= 0");
    return;
  }
  if (o_.type != DeepSpeedScheduleType::kWarmupLR && o_.total_num_steps <= 0)
    throw Error("scheduler.params.total_num_steps is required (> 0) by this scheduler");
  if (o_.type == DeepSpeedScheduleType::kWarmupCosineLR && o_.total_num_steps <= warmup_)
    throw Error("scheduler.params.total_num_steps " + std::to_string(o_.total_num_steps) +
                " must exceed warmup_num_steps " + std::to_string(warmup_) + " for WarmupCosineLR");
}

double DeepSpeedLRSchedule::warmup_gamma(int64_t s) const {
  return o_.log_warmup ? std::log(double(s) + 1.0) / std::log(double(warmup_))
                       : double(s) / double(warmup_);
}

double DeepSpeedLRSchedule::lr_at(int64_t step) const {
  TESSERA_CHECK(step >= 0);
  // OneCycle's constructor sets cycle_min_lr for the first update (its formula's value at b = 0).
  if (o_.type == DeepSpeedScheduleType::kOneCycle && step == 0) return o_.cycle_min_lr;
  return value_at_iteration(std::max<int64_t>(0, step - 1));
}

double DeepSpeedLRSchedule::one_cycle_fraction(int64_t s) const {
  // In DeepSpeed's floating-point order, so the values match its own to the last bit.
  const double total = double(o_.cycle_first_step_size) + double(o_.cycle_second_step_size);
  const double ratio = double(o_.cycle_first_step_size) / total;
  const double b = double(s + 1);
  const double cycle = std::floor(1.0 + b / total);
  const double x = 1.0 + b / total - cycle;
  return x <= ratio ? x / ratio : (x - 1.0) / (ratio - 1.0);
}

double DeepSpeedLRSchedule::one_cycle_decay(int64_t s) const {
  const int64_t total = o_.cycle_first_step_size + o_.cycle_second_step_size;
  return double(s - total + 1) / double(o_.decay_step_size);
}

std::optional<std::pair<double, double>> DeepSpeedLRSchedule::betas_at(int64_t step) const {
  if (o_.type != DeepSpeedScheduleType::kOneCycle || !o_.cycle_momentum) return std::nullopt;
  constexpr double kBeta2 = 0.99;  // DeepSpeed's OneCycle sets it with every beta1
  if (step == 0) return std::pair{o_.cycle_min_mom, kBeta2};  // set by its constructor
  const int64_t s = step - 1;
  if (s < o_.cycle_first_step_size + o_.cycle_second_step_size)
    return std::pair{
        o_.cycle_max_mom - (o_.cycle_max_mom - o_.cycle_min_mom) * one_cycle_fraction(s), kBeta2};
  if (o_.decay_step_size == 0 || o_.decay_mom_rate == 0) return std::pair{o_.cycle_max_mom, kBeta2};
  return std::pair{o_.cycle_max_mom * (1.0 + o_.decay_mom_rate * one_cycle_decay(s)), kBeta2};
}

double DeepSpeedLRSchedule::value_at_iteration(int64_t s) const {
  TESSERA_CHECK(s >= 0);
  const double delta = o_.warmup_max_lr - o_.warmup_min_lr;
  switch (o_.type) {
    case DeepSpeedScheduleType::kWarmupLR:
      return o_.warmup_min_lr + delta * (s < warmup_ ? warmup_gamma(s) : 1.0);
    case DeepSpeedScheduleType::kWarmupDecayLR: {
      const double gamma =
          s < warmup_ ? warmup_gamma(s)
                      : std::max(0.0, double(o_.total_num_steps - s) /
                                          std::max(1.0, double(o_.total_num_steps - warmup_)));
      return o_.warmup_min_lr + delta * gamma;
    }
    case DeepSpeedScheduleType::kWarmupCosineLR: {
      if (s < warmup_)
        return o_.base_lr * (o_.warmup_min_ratio + (1.0 - o_.warmup_min_ratio) * warmup_gamma(s));
      const double progress = double(s - warmup_ + 1) / double(o_.total_num_steps - warmup_);
      const double cosine = (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
      return o_.base_lr * std::max(0.0, o_.cos_min_ratio + (1.0 - o_.cos_min_ratio) * cosine);
    }
    case DeepSpeedScheduleType::kOneCycle: {
      if (s < o_.cycle_first_step_size + o_.cycle_second_step_size)
        return o_.cycle_min_lr + (o_.cycle_max_lr - o_.cycle_min_lr) * one_cycle_fraction(s);
      if (o_.decay_step_size == 0 || o_.decay_lr_rate == 0) return o_.cycle_min_lr;
      return o_.cycle_min_lr / (1.0 + o_.decay_lr_rate * one_cycle_decay(s));
    }
  }
  return 0.0;
}

}  // namespace tessera::optim
