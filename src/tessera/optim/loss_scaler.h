// Loss scaling for fp16 training: DeepSpeed's DynamicLossScaler (deepspeed/runtime/fp16/
// loss_scaler.py, update_scale) and a static mode with a fixed scale.
#pragma once

#include <cstdint>

namespace tessera::optim {

// Everything a loss scaler is: configuration and state in one plain struct, so a checkpoint
// can store it field by field and a resumed run continues exactly where it stopped.
// Defaults are DeepSpeed's fp16 config defaults (loss_scale 0 = dynamic, initial_scale_power
// 16, loss_scale_window 1000, hysteresis 2, consecutive_hysteresis false, min_loss_scale 1).
struct LossScalerState {
  // Configuration.
  bool dynamic = true;                  // false: static scale, update() never changes it
  int32_t scale_window = 1000;          // loss_scale_window: clean steps between doublings
  int32_t hysteresis = 2;               // overflows tolerated before halving (delayed_shift)
  bool consecutive_hysteresis = false;  // refill hysteresis on every clean step
  double min_scale = 1.0;               // min_loss_scale
  bool raise_error_at_min_scale = true;
  // State.
  double scale = 65536.0;      // cur_scale; starts at 2^initial_scale_power
  int32_t cur_hysteresis = 2;  // starts at `hysteresis`
  int64_t cur_iter = 0;        // calls to update() so far
  int64_t last_overflow_iter = -1;
};

// The scaler: DeepSpeed's dynamic algorithm, or a fixed scale when built with fixed() (the
// StaticLossScaler case). Not thread-safe; one per process, fed the globally reduced (MAX)
// overflow flag so every rank makes the same decision.
class DynamicLossScaler {
 public:
  // Dynamic scaling starting at `initial_scale` (DeepSpeed: 2^initial_scale_power). Throws
  // tessera::Error unless initial_scale and min_scale are finite and > 0, scale_window >= 1 and
  // hysteresis >= 1.
  static DynamicLossScaler dynamic(double initial_scale = 65536.0, int32_t scale_window = 1000,
                                   int32_t hysteresis = 2, double min_scale = 1.0,
                                   bool consecutive_hysteresis = false,
                                   bool raise_error_at_min_scale = true);
  // A fixed scale (DeepSpeed's fp16.loss_scale > 0; 1.0 for bf16/fp32, i.e. no scaling).
  // Overflowing steps must still be skipped by the caller. Throws tessera::Error unless the scale
  // is finite and > 0.
  static DynamicLossScaler fixed(double scale);
  // Restores a saved state (validated as above).
  explicit DynamicLossScaler(const LossScalerState& state);

  // Call once per optimizer step with the overflow flag of that step (the caller skips the
  // update and zeroes gradients when it is true, in both modes). Dynamic mode, DeepSpeed's rule:
  //  overflow:    if hysteresis == 1 or cur_hysteresis == 1: at min_scale already (and
  //               raise_error_at_min_scale) -> throws tessera::Error "Current loss scale already
  //               at minimum - cannot decrease scale anymore"; else scale = max(scale / 2,
  //               min_scale). Otherwise cur_hysteresis -= 1, scale unchanged.
  //               last_overflow_iter = cur_iter.
  //  no overflow: if consecutive_hysteresis, cur_hysteresis = hysteresis. If
  //               (cur_iter - last_overflow_iter) % scale_window == 0: cur_hysteresis =
  //               hysteresis (when not consecutive) and scale *= 2.
  //  then cur_iter += 1 (also in static mode). When it throws, the state is left unchanged.
  void update(bool overflow);

  // The factor the loss is multiplied by before backward (gradients are divided by it).
  double scale() const { return state_.scale; }
  bool is_dynamic() const { return state_.dynamic; }
  const LossScalerState& state() const { return state_; }

 private:
  LossScalerState state_;
};

}  // namespace tessera::optim
