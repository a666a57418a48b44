#include "tessera/model/mlp.h"

#include <cmath>

#include "tessera/kernels/activations.h"

namespace tessera::model {

std::vector<std::string> Mlp::up_names(const std::string& prefix, const ModelConfig& cfg,
                                       const char* suffix) {
  if (cfg.swiglu) return {prefix + ".gate_proj" + suffix, prefix + ".up_proj" + suffix};
  if (cfg.family() == Family::kGpt2) return {prefix + ".c_fc" + suffix};
  return {prefix + ".up_proj" + suffix};
}

std::string Mlp::down_name(const std::string& prefix, const ModelConfig& cfg) {
  return prefix + (cfg.family() == Family::kGpt2 ? ".c_proj" : ".down_proj");
}

void Mlp::declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg) {
  const int64_t C = cfg.hidden_size, F = cfg.ffn();
  const float std = cfg.init_method_std;
  const float out_std = std / std::sqrt(2.0f * cfg.num_layers);
  for (const auto& name : up_names(prefix, cfg, ".weight"))
    params.add(name, {F, C}, InitKind::kNormal, std, true);
  if (cfg.add_bias_linear) {
    for (const auto& name : up_names(prefix, cfg, ".bias"))
      params.add(name, {F}, InitKind::kZeros, 0.0f, false);
  }
  const std::string down = down_name(prefix, cfg);
  params.add(down + ".weight", {C, F}, InitKind::kNormal, out_std, true);
  if (cfg.add_bias_linear) params.add(down + ".bias", {C}, InitKind::kZeros, 0.0f, false);
}

Mlp::Mlp(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg)
    : swiglu_(cfg.swiglu), F_(cfg.ffn()) {
  const std::string down = down_name(prefix, cfg);
  const bool bias = cfg.add_bias_linear;
  up_ = Linear::bind(params, up_names(prefix, cfg, ".weight"),
                     bias ? up_names(prefix, cfg, ".bias") : std::vector<std::string>{});
  down_ = Linear::bind(params, {down + ".weight"},
                       bias ? std::vector<std::string>{down + ".bias"} : std::vector<std::string>{});
}

Tensor Mlp::forward(const Tensor& x, Saved& s) const {
  const int64_t N = x.dim(0);
  s.inp = x;
  s.h = up_.forward(x);
  s.act = Tensor::empty({N, F_}, x.dtype());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (swiglu_) {
      kernels::swiglu_forward(s.act.data<T>(), s.h.data<T>(), N, F_);
    } else {
      kernels::gelu_forward(s.act.data<T>(), s.h.data<T>(), N * F_);
    }
  });
  return down_.forward(s.act);
}

Tensor Mlp::backward(const Tensor& dy, const Saved& s) const {
  const int64_t N = dy.dim(0);
  Tensor dact = down_.backward(dy, s.act);
  Tensor dh = Tensor::empty(s.h.shape(), dy.dtype());
  visit_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (swiglu_) {
      kernels::swiglu_backward(dh.data<T>(), dact.data<T>(), s.h.data<T>(), N, F_);
    } else {
      kernels::gelu_backward(dh.data<T>(), dact.data<T>(), s.h.data<T>(), N * F_);
    }
  });
  return up_.backward(dh, s.inp);
}

}  // namespace tessera::model
