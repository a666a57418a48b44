// The optimizer over a model's flat parameter buffers: fp32 master weights, AdamW moments or
// SGD momentum, one fused pass per parameter (weight decay applies to parameters marked for it:
// not to biases or norm weights).
//
// Mixed precision: with bf16 compute the master weights are a separate fp32 copy and each step
// writes the rounded bf16 values back into the model's buffer. With fp32 compute the model's
// buffer *is* the master copy (no duplicate).
#pragma once

#include <string>

#include "tessera/model/parameter.h"

namespace tessera::optim {

struct OptimizerOptions {
  std::string kind = "adam";  // "adam" (AdamW) or "sgd"
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double momentum = 0.9;
  double weight_decay = 0.01;
};

class Optimizer {
 public:
  Optimizer(model::ParameterSet& params, const OptimizerOptions& options);

  // One update with learning rate `lr`; the gradients used are flat_grads * grad_scale
  // (grad_scale folds in 1/loss_scale and the clipping coefficient).
  void step(double lr, float grad_scale);
  int64_t steps() const { return steps_; }

  // The fp32 master value of a parameter (a view; for export and checkpoints).
  Tensor master(const model::Parameter& p) const;

 private:
  model::ParameterSet& params_;
  OptimizerOptions options_;
  bool separate_master_;
  Tensor master_, exp_avg_, exp_avg_sq_;
  int64_t steps_ = 0;
};

}  // namespace tessera::optim
