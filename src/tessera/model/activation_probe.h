// A view into a training pass for diagnostics (train's --dump-numerics): ChunkRunner calls it
// with the residual-stream tensors of each micro-batch as they are made, in training passes only
// (not evaluation, not the forward reruns of recomputation).
//
// Contract for implementations: they may read the tensors and must not keep them; the one
// permitted change is backward_input_grad's (a planted fault for tests of the diff tool).
#pragma once

#include "tessera/core/tensor.h"
#include "tessera/model/context.h"

namespace tessera::model {

class ActivationProbe {
 public:
  virtual ~ActivationProbe() = default;
  // The embedding's output (layer -1) and layer l's output (l its index in the whole model): this
  // rank's residual-stream rows, (ctx.local_N(), C).
  virtual void forward_output(int layer, const Tensor& x, const StepContext& ctx) = 0;
  // In backward: the gradient the head hands to the last layer (layer = the model's layer
  // count) and the gradient of layer l's input; the same rows as forward_output's.
  virtual void backward_input_grad(int layer, Tensor& dx, const StepContext& ctx) = 0;
};

}  // namespace tessera::model
