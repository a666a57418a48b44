#include "tessera/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::optim {
namespace {

[[noreturn]] void bad_option(const std::string& flag, const std::string& what) {
  throw Error(flag + ": " + what);
}

std::string to_string(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

}  // namespace

LRDecayStyle parse_lr_decay_style(const std::string& name) {
  if (name == "constant") return LRDecayStyle::kConstant;
  if (name == "linear") return LRDecayStyle::kLinear;
  if (name == "cosine") return LRDecayStyle::kCosine;
  if (name == "inverse-square-root") return LRDecayStyle::kInverseSquareRoot;
  if (name == "WSD") return LRDecayStyle::kWSD;
  bad_option("--lr-decay-style", "unknown style '" + name +
                                     "', expected one of constant, linear, cosine, "
                                     "inverse-square-root, WSD");
}

WSDDecayStyle parse_wsd_decay_style(const std::string& name) {
  if (name == "exponential") return WSDDecayStyle::kExponential;
  if (name == "linear") return WSDDecayStyle::kLinear;
  if (name == "cosine") return WSDDecayStyle::kCosine;
  if (name == "minus_sqrt") return WSDDecayStyle::kMinusSqrt;
  bad_option(
      "--lr-wsd-decay-style",
      "unknown style '" + name + "', expected one of exponential, linear, cosine, minus_sqrt");
}

const char* lr_decay_style_name(LRDecayStyle style) {
  switch (style) {
    case LRDecayStyle::kConstant:
      return "constant";
    case LRDecayStyle::kLinear:
      return "linear";
    case LRDecayStyle::kCosine:
      return "cosine";
    case LRDecayStyle::kInverseSquareRoot:
      return "inverse-square-root";
    case LRDecayStyle::kWSD:
      return "WSD";
  }
  return "?";
}

const char* wsd_decay_style_name(WSDDecayStyle style) {
  switch (style) {
    case WSDDecayStyle::kExponential:
      return "exponential";
    case WSDDecayStyle::kLinear:
      return "linear";
    case WSDDecayStyle::kCosine:
      return "cosine";
    case WSDDecayStyle::kMinusSqrt:
      return "minus_sqrt";
  }
  return "?";
}

double warmup_iters_from_fraction(double fraction, int64_t decay_iters) {
  if (!(fraction >= 0.0 && fraction < 1.0)) {
    bad_option("--lr-warmup-fraction", "got " + to_string(fraction) + ", expected 0 <= f < 1");
  }
  return fraction * static_cast<double>(decay_iters);
}

LRScheduler::LRScheduler(const LRScheduleOptions& o) : options_(o) {
  if (!(o.min_lr >= 0.0)) bad_option("--min-lr", "got " + to_string(o.min_lr) + ", expected >= 0");
  if (!(o.lr >= o.min_lr)) {
    bad_option("--lr",
               "got " + to_string(o.lr) + ", expected >= --min-lr (" + to_string(o.min_lr) + ")");
  }
  if (!(o.init_lr <= o.lr)) {
    bad_option("--lr-warmup-init",
               "got " + to_string(o.init_lr) + ", expected <= --lr (" + to_string(o.lr) + ")");
  }
  if (o.decay_iters <= 0) {
    bad_option("--lr-decay-iters", "got " + std::to_string(o.decay_iters) + ", expected > 0");
  }
  if (!(o.warmup_iters >= 0.0 && o.warmup_iters < static_cast<double>(o.decay_iters))) {
    bad_option("--lr-warmup-iters", "got " + to_string(o.warmup_iters) +
                                        ", expected 0 <= warmup < --lr-decay-iters (" +
                                        std::to_string(o.decay_iters) + ")");
  }
  if (o.decoupled_lr >= 0 &&
      !(o.decoupled_lr >= (o.decoupled_min_lr >= 0 ? o.decoupled_min_lr : o.min_lr))) {
    bad_option("--decoupled-lr", "got " + to_string(o.decoupled_lr) +
                                     ", expected >= --decoupled-min-lr (or --min-lr)");
  }
  if (o.decay_style == LRDecayStyle::kWSD && o.wsd_decay_iters < 0) {
    bad_option("--lr-wsd-decay-iters",
               "got " + std::to_string(o.wsd_decay_iters) + ", expected >= 0 with WSD");
  }
}

double LRScheduler::lr_at(int64_t step_count) const {
  return lr_between(step_count, options_.lr, options_.min_lr);
}

double LRScheduler::decoupled_lr_at(int64_t step_count) const {
  if (options_.decoupled_lr < 0) return -1;
  return lr_between(step_count, options_.decoupled_lr,
                    options_.decoupled_min_lr >= 0 ? options_.decoupled_min_lr : options_.min_lr);
}

double LRScheduler::lr_between(int64_t step_count, double peak, double min_lr) const {
  TESSERA_CHECK(step_count >= 0);
  const LRScheduleOptions& o = options_;
  const double step = static_cast<double>(step_count);
  const double decay = static_cast<double>(o.decay_iters);

  if (o.warmup_iters > 0.0 && step <= o.warmup_iters) {
    return o.init_lr + (peak - o.init_lr) * step / o.warmup_iters;
  }
  // Megatron checks constant before the end of decay: a constant schedule never drops to min_lr.
  if (o.decay_style == LRDecayStyle::kConstant) return peak;
  if (step > decay) return min_lr;
  if (o.decay_style == LRDecayStyle::kInverseSquareRoot) {
    const double lr =
        peak * std::sqrt(std::max(o.warmup_iters, 1.0)) / std::sqrt(std::max(step, 1.0));
    return std::max(min_lr, lr);
  }

  const double ratio = (step - o.warmup_iters) / (decay - o.warmup_iters);
  TESSERA_CHECK(ratio >= 0.0 && ratio <= 1.0);
  double coeff = 1.0;
  switch (o.decay_style) {
    case LRDecayStyle::kLinear:
      coeff = 1.0 - ratio;
      break;
    case LRDecayStyle::kCosine:
      coeff = 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
      break;
    case LRDecayStyle::kWSD: {
      const double anneal_start = decay - static_cast<double>(o.wsd_decay_iters);
      if (step <= anneal_start) break;
      // step > anneal_start implies wsd_decay_iters > 0 here.
      const double w = (step - anneal_start) / static_cast<double>(o.wsd_decay_iters);
      switch (o.wsd_decay_style) {
        case WSDDecayStyle::kExponential:
          coeff = 2.0 * std::pow(0.5, w) - 1.0;
          break;
        case WSDDecayStyle::kLinear:
          coeff = 1.0 - w;
          break;
        case WSDDecayStyle::kCosine:
          coeff = 0.5 * (std::cos(std::numbers::pi * w) + 1.0);
          break;
        case WSDDecayStyle::kMinusSqrt:
          coeff = 1.0 - std::sqrt(w);
          break;
      }
      break;
    }
    case LRDecayStyle::kConstant:
    case LRDecayStyle::kInverseSquareRoot:
      TESSERA_CHECK(false);
  }
  return min_lr + coeff * (peak - min_lr);
}

}  // namespace tessera::optim
