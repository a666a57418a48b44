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
  // Rows split across TP by heads: query heads, key groups, value groups each on their own.
  const TpSection q{q_rows, cfg.num_attention_heads}, kv{kv_rows, cfg.kv_heads()};
  const auto w = qkv_names(prefix, cfg, ".weight");
  const auto b = qkv_names(prefix, cfg, ".bias");
  if (w.size() == 1) {  // GPT-2's fused c_attn: [q; k; v] rows
    const ShardSpec fused = ShardSpec::split(0, {q, kv, kv});
    params.add(w[0], {q_rows + 2 * kv_rows, C}, InitKind::kNormal, std, true, fused);
    if (cfg.add_bias_linear)
      params.add(b[0], {q_rows + 2 * kv_rows}, InitKind::kZeros, 0.0f, false, fused);
  } else {
    const ShardSpec qs = ShardSpec::split(0, {q}), kvs = ShardSpec::split(0, {kv});
    params.add(w[0], {q_rows, C}, InitKind::kNormal, std, true, qs);
    params.add(w[1], {kv_rows, C}, InitKind::kNormal, std, true, kvs);
    params.add(w[2], {kv_rows, C}, InitKind::kNormal, std, true, kvs);
    if (cfg.add_bias_linear) {
      params.add(b[0], {q_rows}, InitKind::kZeros, 0.0f, false, qs);
      params.add(b[1], {kv_rows}, InitKind::kZeros, 0.0f, false, kvs);
      params.add(b[2], {kv_rows}, InitKind::kZeros, 0.0f, false, kvs);
    }
  }
  const std::string out = out_name(prefix, cfg);
  params.add(out + ".weight", {C, q_rows}, InitKind::kNormal, out_std, true,
             ShardSpec::split(1, {q}));
  if (cfg.add_bias_linear) params.add(out + ".bias", {C}, InitKind::kZeros, 0.0f, false);
}

Attention::Attention(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg,
                     int layer, const parallel::TensorParallel* tp)
    : NH_global_(cfg.num_attention_heads),
      HD_(cfg.head_dim()),
      layer_(layer),
      rope_(cfg.position_embedding == PositionEmbedding::kRope),
      rope_theta_(cfg.rotary_base),
      dropout_p_(cfg.attention_dropout) {
  const int T = params.tp_size(), KV = cfg.kv_heads();
  NH_ = NH_global_ / T;
  KV_ = KV % T == 0 ? KV / T : 1;
  head_offset_ = params.tp_rank() * NH_;
  const std::string out = out_name(prefix, cfg);
  const bool bias = cfg.add_bias_linear;
  qkv_ = ColumnParallelLinear(
      Linear::bind(params, qkv_names(prefix, cfg, ".weight"),
                   bias ? qkv_names(prefix, cfg, ".bias") : std::vector<std::string>{}),
      tp);
  Tensor out_bias, out_dbias;
  if (bias) {
    out_bias = params.get(out + ".bias").value;
    out_dbias = params.get(out + ".bias").grad;
  }
  out_ = RowParallelLinear(Linear::bind(params, {out + ".weight"}, {}), out_bias, out_dbias, tp);
}

kernels::AttentionDropout Attention::dropout(const StepContext& ctx) const {
  kernels::AttentionDropout d;
  d.p = ctx.training ? dropout_p_ : 0.0f;
  d.key = ctx.dropout_key(RngPurpose::kAttentionDropout, layer_);
  d.sample_offset = ctx.coords.sample_offset;
  d.head_offset = head_offset_;
  d.num_heads_global = NH_global_;
  return d;
}

// The attention core: attn (N, NH*HD) and lse (B, NH, T) from the roped qkv.
void Attention::core(Tensor& attn, Tensor& lse, const Tensor& qkv, const StepContext& ctx) const {
  attn = Tensor::empty({ctx.N(), static_cast<int64_t>(NH_) * HD_}, qkv.dtype());
  lse = Tensor::empty({ctx.B, NH_, ctx.T}, DType::kF32);
  visit_float(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::attention_forward(attn.data<T>(), lse.data<float>(), qkv.data<T>(), ctx.B, ctx.T, NH_,
                               KV_, HD_, dropout(ctx), ctx.doc_start);
  });
}

Tensor Attention::forward(const Tensor& x, Saved& s, const StepContext& ctx) const {
  s.qkv = qkv_.forward(x, ctx.B, &s.inp);
  if (rope_) {
    visit_float(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const bool per_sample = ctx.sample_positions != nullptr;
      kernels::rope_forward(s.qkv.data<T>(),
                            per_sample ? ctx.sample_positions : ctx.positions.data(), ctx.B, ctx.T,
                            NH_, KV_, HD_, rope_theta_, per_sample);
    });
  }
  core(s.attn, s.lse, s.qkv, ctx);
  Tensor y = out_.forward(s.attn, ctx.B);
  if (recompute_core_) s.attn = s.lse = Tensor();
  return y;
}

Tensor Attention::backward(const Tensor& dy, const Saved& s, const StepContext& ctx) const {
  Tensor attn = s.attn, lse = s.lse;
  if (!attn.defined()) core(attn, lse, s.qkv, ctx);  // selective recomputation
  Tensor dattn = out_.backward(dy, attn, ctx.B);
  Tensor dqkv = Tensor::empty(s.qkv.shape(), dy.dtype());
  visit_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::attention_backward(dqkv.data<T>(), dattn.data<T>(), s.qkv.data<T>(), attn.data<T>(),
                                lse.data<float>(), ctx.B, ctx.T, NH_, KV_, HD_, dropout(ctx),
                                ctx.doc_start);
    if (rope_) {
      const bool per_sample = ctx.sample_positions != nullptr;
      kernels::rope_backward(dqkv.data<T>(),
                             per_sample ? ctx.sample_positions : ctx.positions.data(), ctx.B, ctx.T,
                             NH_, KV_, HD_, rope_theta_, per_sample);
    }
  });
  return qkv_.backward(dqkv, s.inp, ctx.B);
}

}  // namespace tessera::model
