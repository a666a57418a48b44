// Linear module over a (possibly fused) weight view: out = x @ W^T + b.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/model/parameter.h"
#include "tessera/quant/quantized_matrix.h"

namespace tessera::model {

class Linear {
 public:
  Linear() = default;
  // weight (OC, C) and its fp32 grad; bias (OC) and its grad, or undefined tensors.
  Linear(Tensor weight, Tensor dweight, Tensor bias, Tensor dbias)
      : weight_(std::move(weight)), bias_(std::move(bias)), dweight_(std::move(dweight)),
        dbias_(std::move(dbias)) {}

  // The Linear over the parameters named `weights` (consecutive, fused into one (OC, C) view)
  // and `biases` (fused likewise; empty for no bias).
  static Linear bind(const ParameterSet& params, const std::vector<std::string>& weights,
                     const std::vector<std::string>& biases);

  // x (N, C) -> (N, OC).
  Tensor forward(const Tensor& x) const;
  // dy (N, OC), x the forward input -> dx (N, C); accumulates dW (and db).
  Tensor backward(const Tensor& dy, const Tensor& x) const;

  // Inference with weight-only quantization: the weight's current values quantized in `format`
  // (quant/quantized_matrix.h; `group` for q4); forward() then multiplies by the codes
  // (quant/quantized_linear.h) and backward() refuses. The full-precision weight is not read
  // again. tessera::Error when the weight's shape does not suit the format.
  void quantize(quant::QuantFormat format, int64_t group);
  bool quantized() const { return quantized_ != nullptr; }
  const quant::QuantizedMatrix* quantized_weight() const { return quantized_.get(); }

 private:
  // Gradient handles are mutable: backward() is const (it does not change the layer) but
  // accumulates into the gradient buffers these views point at.
  Tensor weight_, bias_;
  mutable Tensor dweight_, dbias_;
  std::shared_ptr<const quant::QuantizedMatrix> quantized_;  // shared by copies of the layer
};

}  // namespace tessera::model
