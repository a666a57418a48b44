#include "tessera/model/mlp.h"

#include <cmath>

#include "tessera/kernels/activations.h"

namespace tessera::model {

Mlp::Names Mlp::projection_names(const std::vector<std::string>& up, const std::string& down) {
  Names n;
  for (const auto& u : up) {
    n.up_weights.push_back(u + ".weight");
    n.up_biases.push_back(u + ".bias");
  }
  n.down_weight = down + ".weight";
  n.down_bias = down + ".bias";
  return n;
}

Mlp::Names Mlp::dense_names(const std::string& prefix, const ModelConfig& cfg) {
  const bool gpt2 = cfg.family() == Family::kGpt2;
  std::vector<std::string> up;
  if (cfg.swiglu) {
    up = {prefix + ".gate_proj", prefix + ".up_proj"};
  } else {
    up = {prefix + (gpt2 ? ".c_fc" : ".up_proj")};
  }
  return projection_names(up, prefix + (gpt2 ? ".c_proj" : ".down_proj"));
}

void Mlp::declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg) {
  declare(params, dense_names(prefix, cfg), cfg.ffn(), cfg);
}

Mlp::Mlp(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg,
         const parallel::TensorParallel* tp)
    : Mlp(params, dense_names(prefix, cfg), cfg.ffn(), cfg, tp) {}

void Mlp::declare(ParameterSet& params, const Names& names, int64_t ffn, const ModelConfig& cfg,
                  bool split) {
  const int64_t C = cfg.hidden_size, F = ffn;
  const float std = cfg.init_method_std;
  const float out_std = std / std::sqrt(2.0f * cfg.num_layers);
  const ShardSpec columns = split ? ShardSpec::split(0) : ShardSpec{};
  const ShardSpec rows = split ? ShardSpec::split(1) : ShardSpec{};
  for (const auto& name : names.up_weights)
    params.add(name, {F, C}, InitKind::kNormal, std, true, columns);
  if (cfg.add_bias_linear) {
    for (const auto& name : names.up_biases)
      params.add(name, {F}, InitKind::kZeros, 0.0f, false, columns);
  }
  params.add(names.down_weight, {C, F}, InitKind::kNormal, out_std, true, rows);
  if (cfg.add_bias_linear) params.add(names.down_bias, {C}, InitKind::kZeros, 0.0f, false);
}

Mlp::Mlp(ParameterSet& params, const Names& names, int64_t ffn, const ModelConfig& cfg,
         const parallel::TensorParallel* tp)
    : swiglu_(cfg.swiglu), F_(ffn / (tp != nullptr ? tp->size() : 1)) {
  const bool bias = cfg.add_bias_linear;
  up_ = ColumnParallelLinear(
      Linear::bind(params, names.up_weights, bias ? names.up_biases : std::vector<std::string>{}),
      tp);
  Tensor down_bias, down_dbias;
  if (bias) {
    down_bias = params.get(names.down_bias).value;
    down_dbias = params.get(names.down_bias).grad;
  }
  down_ = RowParallelLinear(Linear::bind(params, {names.down_weight}, {}), down_bias, down_dbias,
                            tp);
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
