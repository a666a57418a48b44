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
    params.add(name, {F, C}, InitKind::kNormal, std, true, ShardSpec::split(0));
  if (cfg.add_bias_linear) {
    for (const auto& name : up_names(prefix, cfg, ".bias"))
      params.add(name, {F}, InitKind::kZeros, 0.0f, false, ShardSpec::split(0));
  }
  const std::string down = down_name(prefix, cfg);
  params.add(down + ".weight", {C, F}, InitKind::kNormal, out_std, true, ShardSpec::split(1));
  if (cfg.add_bias_linear) params.add(down + ".bias", {C}, InitKind::kZeros, 0.0f, false);
}

Mlp::Mlp(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg,
         const parallel::TensorParallel* tp)
    : swiglu_(cfg.swiglu), F_(cfg.ffn() / params.tp_size()) {
  const std::string down = down_name(prefix, cfg);
  const bool bias = cfg.add_bias_linear;
  up_ = ColumnParallelLinear(
      Linear::bind(params, up_names(prefix, cfg, ".weight"),
                   bias ? up_names(prefix, cfg, ".bias") : std::vector<std::string>{}),
      tp);
  Tensor down_bias, down_dbias;
  if (bias) {
    down_bias = params.get(down + ".bias").value;
    down_dbias = params.get(down + ".bias").grad;
  }
  down_ = RowParallelLinear(Linear::bind(params, {down + ".weight"}, {}), down_bias, down_dbias, tp);
}

Tensor Mlp::forward(const Tensor& x, Saved& s, int64_t batch) const {
  s.h = up_.forward(x, batch, &s.inp);
  const int64_t N = s.h.dim(0);
  s.act = Tensor::empty({N, F_}, x.dtype());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (swiglu_) {
      kernels::swiglu_forward(s.act.data<T>(), s.h.data<T>(), N, F_);
    } else {
      kernels::gelu_forward(s.act.data<T>(), s.h.data<T>(), N * F_);
    }
  });
  return down_.forward(s.act, batch);
}

Tensor Mlp::backward(const Tensor& dy, const Saved& s, int64_t batch) const {
  Tensor dact = down_.backward(dy, s.act, batch);
  const int64_t N = dact.dim(0);
  Tensor dh = Tensor::empty(s.h.shape(), dy.dtype());
  visit_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (swiglu_) {
      kernels::swiglu_backward(dh.data<T>(), dact.data<T>(), s.h.data<T>(), N, F_);
    } else {
      kernels::gelu_backward(dh.data<T>(), dact.data<T>(), s.h.data<T>(), N * F_);
    }
  });
  return up_.backward(dh, s.inp, batch);
}

}  // namespace tessera::model
