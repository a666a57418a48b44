#include "tessera/model/linear.h"

#include "tessera/kernels/linear.h"

namespace tessera::model {

Linear Linear::bind(const ParameterSet& params, const std::vector<std::string>& weights,
                    const std::vector<std::string>& biases) {
  Tensor bias, dbias;
  if (!biases.empty()) {
    bias = params.fused_value(biases);
    dbias = params.fused_grad(biases);
  }
  return Linear(params.fused_value(weights), params.fused_grad(weights), bias, dbias);
}

Tensor Linear::forward(const Tensor& x) const {
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

}  // namespace tessera::model
