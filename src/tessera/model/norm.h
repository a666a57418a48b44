// Norm module: LayerNorm (weight, bias) or RMSNorm (weight), over the hidden dimension.
#pragma once

#include <string>

#include "tessera/model/config.h"
#include "tessera/model/parameter.h"

namespace tessera::model {

class Norm {
 public:
  struct Saved {
    Tensor inp;         // (N, C), a handle to the caller's tensor (no copy)
    Tensor mean, rstd;  // (N) fp32; mean only for LayerNorm
  };

  // Declares `<prefix>.weight` (and `.bias` for LayerNorm) in `params`.
  static void declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg);
  Norm(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg);

  // x (N, C) -> (N, C).
  Tensor forward(const Tensor& x, Saved& s) const;
  // dy (N, C) -> dx (N, C); accumulates the weight (and bias) gradients.
  Tensor backward(const Tensor& dy, const Saved& s) const;

 private:
  Normalization kind_;
  float eps_;
  Tensor weight_, bias_;
  mutable Tensor dweight_, dbias_;  // backward() is const but accumulates through these views
};

}  // namespace tessera::model
