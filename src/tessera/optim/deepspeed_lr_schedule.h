// DeepSpeed's learning-rate schedulers (deepspeed/runtime/lr_schedules.py: WarmupLR,
// WarmupDecayLR, WarmupCosineLR, OneCycle) as pure functions of the update count, for runs
// configured by a DeepSpeed JSON file. DeepSpeed steps its scheduler after each optimizer step,
// so update u (0 for the first) uses the scheduler's value at batch iteration max(0, u - 1): the
// first two updates both use iteration 0's value. OneCycle is the exception: its constructor sets
// the optimizer's lr to cycle_min_lr and betas to (cycle_min_mom, 0.99), which update 0 uses;
// update u >= 1 uses its value at batch iteration u - 1.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/optim/lr_schedule.h"

namespace tessera::optim {

enum class DeepSpeedScheduleType { kWarmupLR, kWarmupDecayLR, kWarmupCosineLR, kOneCycle };

// "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle"; throws tessera::Error for anything
// else (LRRangeTest named as not implemented).
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
  // OneCycle (DeepSpeed's constructor defaults; the two rates are required by DeepSpeed).
  double cycle_min_lr = 0.0, cycle_max_lr = 0.0;
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  int64_t cycle_second_step_size = -1;  // -1: cycle_first_step_size
  int64_t decay_step_size = 0;          // 0: no post-cycle decay
  bool cycle_momentum = true;           // cycles Adam's beta1 (beta2 becomes 0.99)
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
};

// With W = max(2, warmup_num_steps) and warmup gamma(s) = ln(s + 1) / ln(W) (log) or s / W
// (linear) for s < W:
//   WarmupLR:       min + (max - min) * (s < W ? gamma(s) : 1)
//   WarmupDecayLR:  min + (max - min) * (s < W ? gamma(s) : max(0, (T - s) / max(1, T - W)))
//   WarmupCosineLR: base_lr * (s < W ? wmin + (1 - wmin) * gamma(s)
//                                    : max(0, cmin + (1 - cmin) * (1 + cos(pi (s - W + 1) / (T -
//                                    W))) / 2))
//   OneCycle:       with F, S the step sizes, N = F + S and, at b = s + 1,
//                   x = b / N - floor(b / N), f = x <= F / N ? x N / F : (1 - x) N / S:
//                   s < N: lr = min_lr + (max_lr - min_lr) f, beta1 = max_mom - (max_mom -
//                   min_mom) f; s >= N, with d = (s - N + 1) / decay_step_size: lr = min_lr /
//                   (1 + decay_lr_rate d), beta1 = max_mom (1 + decay_mom_rate d) (no decay
//                   when decay_step_size or the rate is 0); beta2 = 0.99 throughout
class DeepSpeedLRSchedule : public LRSchedule {
 public:
  // Throws tessera::Error (naming the scheduler parameter) for negative rates, or a missing or
  // too small total_num_steps where it is needed.
  explicit DeepSpeedLRSchedule(const DeepSpeedScheduleOptions& options);
  // The learning rate of update `step` (see above).
  double lr_at(int64_t step) const override;
  // The scheduler's value at batch iteration s (the formulas above).
  double value_at_iteration(int64_t s) const;
  // OneCycle with cycle_momentum: (beta1, 0.99) of update `step`; otherwise nullopt.
  std::optional<std::pair<double, double>> betas_at(int64_t step) const override;

 private:
  double warmup_gamma(int64_t step) const;
  double one_cycle_fraction(int64_t s) const;  // f at batch iteration s
  double one_cycle_decay(int64_t s) const;     // d at batch iteration s >= N
  DeepSpeedScheduleOptions o_;
  int64_t warmup_;  // W
};

}  // namespace tessera::optim
