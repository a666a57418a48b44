#include "tessera/model/attention.h"

#include <cmath>

#include "tessera/kernels/attention.h"
#include "tessera/kernels/rope.h"

namespace tessera::model {

std::vector<std::string> Attention::qkv_names(const std::string& prefix, const ModelConfig& cfg,
                                              const char* suffix) {
  if (cfg.family() == Family::kGpt2) return {prefix + ".c_attn" + suffix};
  return {prefix + ".q_proj" + suffix, prefix + ".k_proj" + suffix, prefix + ".v_proj" + suffix};
}

std::string Attention::out_name(const std::string& prefix, const ModelConfig& cfg) {
  return prefix + (cfg.family() == Family::kGpt2 ? ".c_proj" : ".o_proj");
}

void Attention::declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg) {
  const int64_t C = cfg.hidden_size, HD = cfg.head_dim();
  const int64_t q_rows = cfg.num_attention_heads * HD, kv_rows = cfg.kv_heads() * HD;
  const float std = cfg.init_method_std;
  // Megatron scales the init of layers that write into the residual stream by 1/sqrt(2L).
  const float out_std = std / std::sqrt(2.0f * cfg.num_layers);
  const auto w = qkv_names(prefix, cfg, ".weight");
  const auto b = qkv_names(prefix, cfg, ".bias");
  if (w.size() == 1) {
    params.add(w[0], {q_rows + 2 * kv_rows, C}, InitKind::kNormal, std, true);
  } else {
    params.add(w[0], {q_rows, C}, InitKind::kNormal, std, true);
    params.add(w[1], {kv_rows, C}, InitKind::kNormal, std, true);
    params.add(w[2], {kv_rows, C}, InitKind::kNormal, std, true);
  }
  if (cfg.add_bias_linear) {
    if (b.size() == 1) {
      params.add(b[0], {q_rows + 2 * kv_rows}, InitKind::kZeros, 0.0f, false);
    } else {
      params.add(b[0], {q_rows}, InitKind::kZeros, 0.0f, false);
      params.add(b[1], {kv_rows}, InitKind::kZeros, 0.0f, false);
      params.add(b[2], {kv_rows}, InitKind::kZeros, 0.0f, false);
    }
  }
  const std::string out = out_name(prefix, cfg);
  params.add(out + ".weight", {C, q_rows}, InitKind::kNormal, out_std, true);
  if (cfg.add_bias_linear) params.add(out + ".bias", {C}, InitKind::kZeros, 0.0f, false);
}

Attention::Attention(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg,
                     int layer)
    : NH_(cfg.num_attention_heads), KV_(cfg.kv_heads()), HD_(cfg.head_dim()), layer_(layer),
      rope_(cfg.position_embedding == PositionEmbedding::kRope), rope_theta_(cfg.rotary_base),
      dropout_p_(cfg.attention_dropout) {
  const std::string out = out_name(prefix, cfg);
  const bool bias = cfg.add_bias_linear;
  qkv_ = Linear::bind(params, qkv_names(prefix, cfg, ".weight"),
                      bias ? qkv_names(prefix, cfg, ".bias") : std::vector<std::string>{});
  out_ = Linear::bind(params, {out + ".weight"},
                      bias ? std::vector<std::string>{out + ".bias"} : std::vector<std::string>{});
}

kernels::AttentionDropout Attention::dropout(const StepContext& ctx) const {
  kernels::AttentionDropout d;
  d.p = ctx.training ? dropout_p_ : 0.0f;
  d.key = ctx.dropout_key(RngPurpose::kAttentionDropout, layer_);
  d.sample_offset = ctx.coords.sample_offset;
  d.head_offset = 0;
  d.num_heads_global = NH_;
  return d;
}

Tensor Attention::forward(const Tensor& x, Saved& s, const StepContext& ctx) const {
  s.inp = x;
  s.qkv = qkv_.forward(x);
  s.attn = Tensor::empty({ctx.N(), static_cast<int64_t>(NH_) * HD_}, x.dtype());
  s.lse = Tensor::empty({ctx.B, NH_, ctx.T}, DType::kF32);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (rope_) {
      kernels::rope_forward(s.qkv.data<T>(), ctx.positions.data(), ctx.B, ctx.T, NH_, KV_, HD_,
                            rope_theta_);
    }
    kernels::attention_forward(s.attn.data<T>(), s.lse.data<float>(), s.qkv.data<T>(), ctx.B,
                               ctx.T, NH_, KV_, HD_, dropout(ctx));
  });
  return out_.forward(s.attn);
}

Tensor Attention::backward(const Tensor& dy, const Saved& s, const StepContext& ctx) const {
  Tensor dattn = out_.backward(dy, s.attn);
  Tensor dqkv = Tensor::empty(s.qkv.shape(), dy.dtype());
  visit_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::attention_backward(dqkv.data<T>(), dattn.data<T>(), s.qkv.data<T>(),
                                s.attn.data<T>(), s.lse.data<float>(), ctx.B, ctx.T, NH_, KV_,
                                HD_, dropout(ctx));
    if (rope_) {
      kernels::rope_backward(dqkv.data<T>(), ctx.positions.data(), ctx.B, ctx.T, NH_, KV_, HD_,
                             rope_theta_);
    }
  });
  return qkv_.backward(dqkv, s.inp);
}

}  // namespace tessera::model
