#include "tessera/model/transformer_layer.h"

#include "tessera/kernels/dropout.h"
#include "tessera/kernels/elementwise.h"

namespace tessera::model {
namespace {

struct LayerNames {
  std::string norm1, attn, norm2, mlp;
};

LayerNames names(const ModelConfig& cfg, const std::string& p) {
  if (cfg.family() == Family::kGpt2) return {p + ".ln_1", p + ".attn", p + ".ln_2", p + ".mlp"};
  return {p + ".input_layernorm", p + ".self_attn", p + ".post_attention_layernorm", p + ".mlp"};
}

}  // namespace

std::string TransformerLayer::prefix(const ModelConfig& cfg, int index) {
  return (cfg.family() == Family::kGpt2 ? "transformer.h." : "model.layers.") +
         std::to_string(index);
}

void TransformerLayer::declare(ParameterSet& params, const ModelConfig& cfg, int index,
                               bool with_experts) {
  const LayerNames n = names(cfg, prefix(cfg, index));
  Norm::declare(params, n.norm1, cfg);
  Attention::declare(params, n.attn, cfg);
  Norm::declare(params, n.norm2, cfg);
  if (cfg.is_moe_layer(index))
    MoeLayer::declare(params, prefix(cfg, index), cfg, with_experts);
  else
    Mlp::declare(params, n.mlp, cfg);
}

TransformerLayer::TransformerLayer(ParameterSet& params, const ModelConfig& cfg, int index,
                                   const parallel::TensorParallel* tp,
                                   comm::ProcessGroup* expert_group,
                                   const context::ContextParallel* cp, bool experts_whole)
    : index_(index), hidden_dropout_(cfg.hidden_dropout),
      norm1_(params, names(cfg, prefix(cfg, index)).norm1, cfg),
      norm2_(params, names(cfg, prefix(cfg, index)).norm2, cfg),
      attn_(params, names(cfg, prefix(cfg, index)).attn, cfg, index, tp, cp) {
  if (cfg.is_moe_layer(index))
    moe_.emplace_back(params, prefix(cfg, index), cfg, tp, expert_group,
                      cp != nullptr ? cp->group().get() : nullptr, experts_whole);
  else
    mlp_.emplace_back(params, names(cfg, prefix(cfg, index)).mlp, cfg, tp);
}

// Dropout sites are numbered 2*layer (after attention) and 2*layer + 1 (after the MLP).
Tensor TransformerLayer::dropout_add(const Tensor& residual, const Tensor& branch, int site,
                                     const StepContext& ctx) const {
  const int64_t N = branch.dim(0), C = branch.dim(1);
  Tensor out = Tensor::empty(branch.shape(), branch.dtype());
  visit_float(branch.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const float p = ctx.training ? hidden_dropout_ : 0.0f;
    T* b = const_cast<T*>(branch.data<T>());  // the branch output is ours to overwrite
    if (p > 0.0f) {
      kernels::dropout_forward(b, b, ctx.dropout_key(RngPurpose::kHiddenDropout, site),
                               ctx.coords, N, C, p);
    }
    kernels::add(out.data<T>(), residual.data<T>(), b, N * C);
  });
  return out;
}

Tensor TransformerLayer::dropout_backward(const Tensor& d, int site, const StepContext& ctx) const {
  const float p = ctx.training ? hidden_dropout_ : 0.0f;
  if (p == 0.0f) return d;
  Tensor out = Tensor::empty(d.shape(), d.dtype());
  visit_float(d.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::dropout_backward(out.data<T>(), d.data<T>(),
                              ctx.dropout_key(RngPurpose::kHiddenDropout, site), ctx.coords,
                              d.dim(0), d.dim(1), p);
  });
  return out;
}

Tensor TransformerLayer::forward(const Tensor& x, Saved& s, const StepContext& ctx) const {
  Tensor a = attn_.forward(norm1_.forward(x, s.norm1), s.attn, ctx);
  s.residual = dropout_add(x, a, 2 * index_, ctx);
  const Tensor n2 = norm2_.forward(s.residual, s.norm2);
  Tensor m = moe_.empty() ? mlp_[0].forward(n2, s.mlp, ctx.B) : moe_[0].forward(n2, s.moe, ctx);
  return dropout_add(s.residual, m, 2 * index_ + 1, ctx);
}

Tensor TransformerLayer::forward_cached(const Tensor& x, const StepContext& ctx,
                                        const KvBlocks& cache,
                                        const std::vector<CachedSequence>& seqs) const {
  Saved s;  // scratch: the sublayers' forwards fill what a backward would need
  Tensor a = attn_.forward_cached(norm1_.forward(x, s.norm1), ctx, cache, seqs);
  const Tensor residual = dropout_add(x, a, 2 * index_, ctx);
  const Tensor n2 = norm2_.forward(residual, s.norm2);
  Tensor m = moe_.empty() ? mlp_[0].forward(n2, s.mlp, ctx.B) : moe_[0].forward(n2, s.moe, ctx);
  return dropout_add(residual, m, 2 * index_ + 1, ctx);
}

Tensor TransformerLayer::backward(const Tensor& dout, const Saved& s,
                                  const StepContext& ctx) const {
  // out = r + mlp(norm2(r)):  dr = dout + norm2'(mlp'(dout))
  const Tensor dm = dropout_backward(dout, 2 * index_ + 1, ctx);
  Tensor dn2 = moe_.empty() ? mlp_[0].backward(dm, s.mlp, ctx.B) : moe_[0].backward(dm, s.moe, ctx);
  Tensor dr = norm2_.backward(dn2, s.norm2);
  visit_float(dr.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::add(dr.data<T>(), dr.data<T>(), dout.data<T>(), dr.numel());
  });
  // r = x + attn(norm1(x)):  dx = dr + norm1'(attn'(dr))
  Tensor dn1 = attn_.backward(dropout_backward(dr, 2 * index_, ctx), s.attn, ctx);
  Tensor dx = norm1_.backward(dn1, s.norm1);
  visit_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::add(dx.data<T>(), dx.data<T>(), dr.data<T>(), dx.numel());
  });
  return dx;
}

}  // namespace tessera::model
