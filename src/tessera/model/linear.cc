#include "tessera/model/linear.h"

#include "tessera/core/error.h"
#include "tessera/kernels/linear.h"
#include "tessera/quant/quantized_linear.h"

namespace tessera::model {

Linear Linear::bind(const ParameterSet& params, const std::vector<std::string>& weights,
                    const std::vector<std::string>& biases) {
  Tensor bias, dbias;
  if (!biases.empty()) {
    bias = params.fused_value(biases);
    dbias = params.fused_grad(biases);
  }
  Linear linear(params.fused_value(weights), params.fused_grad(weights), bias, dbias);
  linear.weight_names_ = weights;
  return linear;
}

Tensor Linear::forward(const Tensor& x) const {
  if (quantized_) return quant::quantized_linear_forward(x, *quantized_, bias_);
  const int64_t N = x.dim(0), C = x.dim(1), OC = weight_.dim(0);
  TESSERA_CHECK(weight_.dim(1) == C);
  Tensor out = Tensor::empty({N, OC}, x.dtype());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::linear_forward(out.data<T>(), x.data<T>(), weight_.data<T>(),
                            bias_.defined() ? bias_.data<T>() : nullptr, N, C, OC);
  });
  return out;
}

Tensor Linear::backward(const Tensor& dy, const Tensor& x) const {
  TESSERA_CHECK_MSG(!quantized_, "a linear layer with quantized weights is for inference only");
  const int64_t N = x.dim(0), C = x.dim(1), OC = weight_.dim(0);
  Tensor dx = Tensor::empty({N, C}, x.dtype());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::linear_backward(dx.data<T>(), dweight_.data<float>(),
                             dbias_.defined() ? dbias_.data<float>() : nullptr, dy.data<T>(),
                             x.data<T>(), weight_.data<T>(), N, C, OC);
  });
  return dx;
}

WeightQuantizer quantize_values(quant::QuantFormat format, int64_t group) {
  return [format, group](const std::vector<std::string>&, const Tensor& weight) {
    return quant::quantize(weight.data<float>(), weight.dim(0), weight.dim(1), format, group);
  };
}

void Linear::quantize(const WeightQuantizer& quantizer) {
  const Tensor w =
      weight_.dtype() == DType::kF32 ? weight_ : weight_.to(DType::kF32, MemoryCategory::kOther);
  quant::QuantizedMatrix q = quantizer(weight_names_, w);
  TESSERA_CHECK_MSG(q.rows == w.dim(0) && q.cols == w.dim(1),
                    "a quantizer returned a matrix of another shape than the weight's");
  quantized_ = std::make_shared<const quant::QuantizedMatrix>(std::move(q));
}

}  // namespace tessera::model
