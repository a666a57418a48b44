// DeepSpeed's learning-rate schedulers (deepspeed/runtime/lr_schedules.py: WarmupLR,
// WarmupDecayLR, WarmupCosineLR) as pure functions of the update count, for runs configured by a
// DeepSpeed JSON file. DeepSpeed steps its scheduler after each optimizer step, so update u
// (0 for the first) uses the scheduler's value at batch iteration max(0, u - 1): the first two
// updates both use iteration 0's value.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/optim/lr_schedule.h"

namespace tessera::optim {

enum class DeepSpeedScheduleType { kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };

// "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"; throws tessera::Error for anything else.
DeepSpeedScheduleType parse_deepspeed_schedule_type(const std::string& name);

// The schedulers' parameters with DeepSpeed's defaults.
struct DeepSpeedScheduleOptions {
  DeepSpeedScheduleType type = DeepSpeedScheduleType::kWarmupLR;
  double warmup_min_lr = 0.0;       // WarmupLR, WarmupDecayLR
  double warmup_max_lr = 0.001;     // WarmupLR, WarmupDecayLR
  int64_t warmup_num_steps = 1000;  // all (DeepSpeed raises values below 2 to 2)
  bool log_warmup = true;           // warmup_type "log" (default) or "linear"
  int64_t total_num_steps = 0;      // WarmupDecayLR, WarmupCosineLR (required)
  double warmup_min_ratio = 0.0;    // WarmupCosineLR, a fraction of base_lr
  double cos_min_ratio = 0.0001;    // WarmupCosineLR, a fraction of base_lr
  double base_lr = 0.001;           // WarmupCosineLR: the optimizer's lr
};

// With W = max(2, warmup_num_steps) and warmup gamma(s) = ln(s + 1) / ln(W) (log) or s / W
// (linear) for s < W:
//   WarmupLR:       min + (max - min) * (s < W ? gamma(s) : 1)
//   WarmupDecayLR:  min + (max - min) * (s < W ? gamma(s) : max(0, (T - s) / max(1, T - W)))
//   WarmupCosineLR: base_lr * (s < W ? wmin + (1 - wmin) * gamma(s)
//                                    : max(0, cmin + (1 - cmin) * (1 + cos(pi (s - W + 1) / (T -
//                                    W))) / 2))
class DeepSpeedLRSchedule : public LRSchedule {
 public:
  // Throws tessera::Error (naming the scheduler parameter) for negative rates, or a missing or
  // too small total_num_steps where it is needed.
  explicit DeepSpeedLRSchedule(const DeepSpeedScheduleOptions& options);
  // The learning rate of update `step` (see above).
  double lr_at(int64_t step) const override;
  // The scheduler's value at batch iteration s (the formulas above).
  double value_at_iteration(int64_t s) const;

 private:
  double warmup_gamma(int64_t step) const;
  DeepSpeedScheduleOptions o_;
  int64_t warmup_;  // W
};

}  // namespace tessera::optim
