// Linear module over a (possibly fused) weight view: out = x @ W^T + b.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/model/parameter.h"
#include "tessera/quant/quantized_matrix.h"

namespace tessera::model {

// Where a linear layer's quantized weight comes from (Linear::quantize). Called with the names
// of the parameters the layer is bound to, in the order their rows are fused (q, k, v; gate, up;
// {"lm_head.weight"} for the output layer, tied or not) and the layer's weight as this rank holds
// it, (OC, C) in fp32; returns the (OC, C) matrix the layer multiplies by. Either quantizes those
// values (quantize_values) or returns stored codes (checkpoint/quantized_hf.h), so a quantized
// directory and quantization on load go through the same layers. Throws tessera::Error for
// anything it cannot provide.
using WeightQuantizer = std::function<quant::QuantizedMatrix(const std::vector<std::string>& names,
                                                             const Tensor& weight)>;

// The quantizer of `--quantize`: the weight's values quantized in `format` (`group` for q4).
WeightQuantizer quantize_values(quant::QuantFormat format, int64_t group);

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

  // The parameter names bind() fused, in row order (empty for a layer built from tensors).
  const std::vector<std::string>& weight_names() const { return weight_names_; }
  void set_weight_names(std::vector<std::string> names) { weight_names_ = std::move(names); }

  // Inference with weight-only quantization: the weight `quantizer` gives for weight_names()
  // and the current values (quant/quantized_matrix.h); forward() then multiplies by the codes
  // (quant/quantized_linear.h) and backward() refuses. The full-precision weight is not read
  // again. Passes on the quantizer's tessera::Error (e.g. a shape the format cannot pack).
  void quantize(const WeightQuantizer& quantizer);
  bool quantized() const { return quantized_ != nullptr; }
  const quant::QuantizedMatrix* quantized_weight() const { return quantized_.get(); }

 private:
  // Gradient handles are mutable: backward() is const (it does not change the layer) but
  // accumulates into the gradient buffers these views point at.
  Tensor weight_, bias_;
  mutable Tensor dweight_, dbias_;
  std::shared_ptr<const quant::QuantizedMatrix> quantized_;  // shared by copies of the layer
  std::vector<std::string> weight_names_;
};

}  // namespace tessera::model
