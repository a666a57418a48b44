#include "tessera/model/norm.h"

#include "tessera/kernels/norms.h"

namespace tessera::model {

void Norm::declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg) {
  params.add(prefix + ".weight", {cfg.hidden_size}, InitKind::kOnes, 0.0f, false);
  if (cfg.normalization == Normalization::kLayerNorm)
    params.add(prefix + ".bias", {cfg.hidden_size}, InitKind::kZeros, 0.0f, false);
}

Norm::Norm(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg)
    : kind_(cfg.normalization), eps_(cfg.norm_epsilon) {
  weight_ = params.get(prefix + ".weight").value;
  dweight_ = params.get(prefix + ".weight").grad;
  if (kind_ == Normalization::kLayerNorm) {
    bias_ = params.get(prefix + ".bias").value;
    dbias_ = params.get(prefix + ".bias").grad;
  }
}

Tensor Norm::forward(const Tensor& x, Saved& s) const {
  const int64_t N = x.dim(0), C = x.dim(1);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  s.inp = x;
  s.rstd = Tensor::empty({N}, DType::kF32);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (kind_ == Normalization::kLayerNorm) {
      s.mean = Tensor::empty({N}, DType::kF32);
      kernels::layer_norm_forward(out.data<T>(), s.mean.data<float>(), s.rstd.data<float>(),
                                  x.data<T>(), weight_.data<T>(), bias_.data<T>(), N, C, eps_);
    } else {
      kernels::rms_norm_forward(out.data<T>(), s.rstd.data<float>(), x.data<T>(),
                                weight_.data<T>(), N, C, eps_);
    }
  });
  return out;
}

Tensor Norm::backward(const Tensor& dy, const Saved& s) const {
  const int64_t N = dy.dim(0), C = dy.dim(1);
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype());
  visit_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (kind_ == Normalization::kLayerNorm) {
      kernels::layer_norm_backward(dx.data<T>(), dweight_.data<float>(), dbias_.data<float>(),
                                   dy.data<T>(), s.inp.data<T>(), weight_.data<T>(),
                                   s.mean.data<float>(), s.rstd.data<float>(), N, C);
    } else {
      kernels::rms_norm_backward(dx.data<T>(), dweight_.data<float>(), dy.data<T>(),
                                 s.inp.data<T>(), weight_.data<T>(), s.rstd.data<float>(), N, C);
    }
  });
  return dx;
}

}  // namespace tessera::model
