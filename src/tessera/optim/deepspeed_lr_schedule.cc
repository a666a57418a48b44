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
  throw Error("scheduler.type: '" + name +
              "' is not supported (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
}

DeepSpeedLRSchedule::DeepSpeedLRSchedule(const DeepSpeedScheduleOptions& options)
    : o_(options), warmup_(std::max<int64_t>(2, options.warmup_num_steps)) {
  if (o_.warmup_min_lr < 0 || o_.warmup_max_lr < 0 || o_.base_lr < 0)
    throw Error("scheduler.params: learning rates must be >= 0");
  if (o_.warmup_num_steps < 0) throw Error("scheduler.params.warmup_num_steps must be >= 0");
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
  return value_at_iteration(std::max<int64_t>(0, step - 1));
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
  }
  return 0.0;
}

}  // namespace tessera::optim
