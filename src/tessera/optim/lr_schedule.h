// Learning-rate schedule with Megatron-LM's OptimizerParamScheduler semantics
// (megatron/core/optimizer_param_scheduler.py, get_lr), as a pure function of the step count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace tessera::optim {

// --lr-decay-style values, spelled as Megatron spells them: "constant", "linear", "cosine",
// "inverse-square-root", "WSD".
enum class LRDecayStyle { kConstant, kLinear, kCosine, kInverseSquareRoot, kWSD };
// --lr-wsd-decay-style values: "exponential", "linear", "cosine", "minus_sqrt".
enum class WSDDecayStyle { kExponential, kLinear, kCosine, kMinusSqrt };

// Parse Megatron's spelling (case-sensitive, as argparse's choices are). Throws tessera::Error
// naming the flag, the value and the accepted values.
LRDecayStyle parse_lr_decay_style(const std::string& name);
WSDDecayStyle parse_wsd_decay_style(const std::string& name);
const char* lr_decay_style_name(LRDecayStyle style);
const char* wsd_decay_style_name(WSDDecayStyle style);

// Megatron's --lr-warmup-fraction: warmup = fraction * decay_iters, kept fractional (Megatron
// does not round it either). Throws tessera::Error unless 0 <= fraction < 1.
double warmup_iters_from_fraction(double fraction, int64_t decay_iters);

// Options, named after Megatron's flags. Defaults are Megatron's where it has one.
struct LRScheduleOptions {
  double lr = 0.0;            // --lr: the peak (max) learning rate
  double min_lr = 0.0;        // --min-lr
  double init_lr = 0.0;       // --lr-warmup-init: where the linear warmup starts
  double warmup_iters = 0.0;  // --lr-warmup-iters, or warmup_iters_from_fraction(...)
  int64_t decay_iters = 0;    // --lr-decay-iters (Megatron's default: --train-iters); counts
                              // from step 0, so it includes the warmup
  LRDecayStyle decay_style = LRDecayStyle::kLinear;             // --lr-decay-style (default linear)
  int64_t wsd_decay_iters = 0;                                  // --lr-wsd-decay-iters (WSD only)
  WSDDecayStyle wsd_decay_style = WSDDecayStyle::kExponential;  // --lr-wsd-decay-style
  // --decoupled-lr / --decoupled-min-lr: the input embedding's and the output layer's peak and
  // minimum (negative: not given; the minimum then is min_lr), on the same schedule.
  double decoupled_lr = -1, decoupled_min_lr = -1;
};

// A learning-rate schedule as a pure function of the number of updates applied so far, so it
// needs no state of its own in a checkpoint beyond its options and the step count the trainer
// already saves. Implementations are immutable and thread-safe.
class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  // Learning rate of the update that follows `step` applied updates (0: the first update).
  virtual double lr_at(int64_t step) const = 0;
  // The same for the input embedding and the output layer under Megatron's --decoupled-lr;
  // negative when they follow lr_at.
  virtual double decoupled_lr_at(int64_t /*step*/) const { return -1; }
  // Adam's (beta1, beta2) for that update when the schedule sets them (DeepSpeed's OneCycle
  // cycles the momentum); nullopt: the optimizer keeps its own.
  virtual std::optional<std::pair<double, double>> betas_at(int64_t /*step*/) const {
    return std::nullopt;
  }
};

// Megatron's schedule.
class LRScheduler : public LRSchedule {
 public:
  // Validates as Megatron asserts: 0 <= min_lr <= lr, init_lr <= lr, decay_iters > 0,
  // 0 <= warmup_iters < decay_iters, and wsd_decay_iters >= 0. Throws tessera::Error naming the
  // offending flag.
  explicit LRScheduler(const LRScheduleOptions& options);

  // Learning rate for the optimizer update that follows `step` successful updates (Megatron's
  // num_steps counted in iterations: 0 for the very first update). Megatron advances this count
  // only when an update succeeds, so after skipped (overflowed) iterations it is less than the
  // iteration number; the caller passes the count of applied updates.
  //   warmup (warmup_iters > 0 and step <= warmup_iters):
  //                        init_lr + (lr - init_lr) * step / warmup_iters
  //   constant:            lr
  //   step > decay_iters:  min_lr
  //   inverse-square-root: max(min_lr, lr * sqrt(max(warmup_iters, 1)) / sqrt(max(step, 1)))
  //   otherwise min_lr + coeff * (lr - min_lr), with r = (step - warmup) / (decay - warmup):
  //     linear: 1 - r;  cosine: (cos(pi r) + 1) / 2;
  //     WSD: 1 until step <= decay_iters - wsd_decay_iters, then with
  //          w = (step - (decay_iters - wsd_decay_iters)) / wsd_decay_iters:
  //          exponential 2 * 0.5^w - 1;  linear 1 - w;  cosine (cos(pi w) + 1) / 2;
  //          minus_sqrt 1 - sqrt(w).
  // Requires step >= 0 (a negative step is a bug: checked).
  double lr_at(int64_t step) const override;
  // lr_at with decoupled_lr and decoupled_min_lr (or min_lr) in place of lr and min_lr: Megatron
  // gives that parameter group its own max_lr and min_lr on the same schedule.
  double decoupled_lr_at(int64_t step) const override;

  const LRScheduleOptions& options() const { return options_; }

 private:
  double lr_between(int64_t step, double peak, double min_lr) const;

  LRScheduleOptions options_;
};

}  // namespace tessera::optim
