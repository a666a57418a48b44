#include "tessera/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "tessera/core/error.h"

namespace tessera::optim {
namespace {

constexpr double kScaleFactor = 2.0;  // DeepSpeed fixes the factor at 2

std::string to_string(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

void validate(const LossScalerState& s) {
  const auto positive_finite = [](double x) { return std::isfinite(x) && x > 0.0; };
  if (!positive_finite(s.scale)) {
    throw Error("loss scale: got " + to_string(s.scale) + ", expected a finite value > 0");
  }
  if (!s.dynamic) return;
  if (!positive_finite(s.min_scale)) {
    throw Error("min_loss_scale: got " + to_string(s.min_scale) + ", expected a finite value > 0");
  }
  if (s.scale_window < 1) {
    throw Error("loss_scale_window: got " + std::to_string(s.scale_window) + ", expected >= 1");
  }
  if (s.hysteresis < 1) {
    throw Error("hysteresis: got " + std::to_string(s.hysteresis) + ", expected >= 1");
  }
}

}  // namespace

DynamicLossScaler DynamicLossScaler::dynamic(double initial_scale, int32_t scale_window,
                                             int32_t hysteresis, double min_scale,
                                             bool consecutive_hysteresis,
                                             bool raise_error_at_min_scale) {
  LossScalerState s;
  s.dynamic = true;
  s.scale_window = scale_window;
  s.hysteresis = hysteresis;
  s.consecutive_hysteresis = consecutive_hysteresis;
  s.min_scale = min_scale;
  s.raise_error_at_min_scale = raise_error_at_min_scale;
  s.scale = initial_scale;
  s.cur_hysteresis = hysteresis;
  s.cur_iter = 0;
  s.last_overflow_iter = -1;
  return DynamicLossScaler(s);
}

DynamicLossScaler DynamicLossScaler::fixed(double scale) {
  LossScalerState s;
  s.dynamic = false;
  s.scale = scale;
  return DynamicLossScaler(s);
}

DynamicLossScaler::DynamicLossScaler(const LossScalerState& state) : state_(state) {
  validate(state_);
}

void DynamicLossScaler::update(bool overflow) {
  LossScalerState& s = state_;
  if (!s.dynamic) {
    if (overflow) s.last_overflow_iter = s.cur_iter;
    ++s.cur_iter;
    return;
  }
  if (overflow) {
    if (s.hysteresis == 1 || s.cur_hysteresis == 1) {
      if (s.scale == s.min_scale && s.raise_error_at_min_scale) {
        throw Error("Current loss scale already at minimum (" + to_string(s.min_scale) +
                    ") - cannot decrease scale anymore: gradients overflow at every scale "
                    "(fp16 training diverged); lower --lr, use bf16, or restart from an earlier "
                    "checkpoint");
      }
      s.scale = std::max(s.scale / kScaleFactor, s.min_scale);
    } else {
      --s.cur_hysteresis;
    }
    s.last_overflow_iter = s.cur_iter;
  } else {
    if (s.consecutive_hysteresis) s.cur_hysteresis = s.hysteresis;
    if ((s.cur_iter - s.last_overflow_iter) % s.scale_window == 0) {
      if (!s.consecutive_hysteresis) s.cur_hysteresis = s.hysteresis;
      s.scale *= kScaleFactor;
    }
  }
  ++s.cur_iter;
}

}  // namespace tessera::optim
