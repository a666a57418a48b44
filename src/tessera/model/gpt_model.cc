#include "tessera/model/gpt_model.h"

#include "tessera/kernels/cross_entropy.h"
#include "tessera/kernels/dropout.h"
#include "tessera/kernels/embedding.h"
#include "tessera/model/linear.h"

namespace tessera::model {
namespace {

struct TopNames {
  std::string wte, wpe, final_norm, head;
};

TopNames top_names(const ModelConfig& cfg) {
  if (cfg.family() == Family::kGpt2)
    return {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f", "lm_head.weight"};
  return {"model.embed_tokens.weight", "model.embed_positions.weight", "model.norm",
          "lm_head.weight"};
}

// The global position of every token of a (B, T) micro-batch, row-major.
std::vector<int32_t> token_positions(const Batch& batch, const StepContext& ctx) {
  std::vector<int32_t> pos(batch.B * batch.T);
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = ctx.positions[i % batch.T];
  return pos;
}

}  // namespace

GPTModel::GPTModel(const ModelConfig& cfg, DType compute_dtype, uint64_t seed) : cfg_(cfg) {
  cfg_.validate();
  padded_vocab_ = cfg_.padded_vocab_size();
  const TopNames n = top_names(cfg_);
  const int64_t C = cfg_.hidden_size;
  params_.add(n.wte, {padded_vocab_, C}, InitKind::kNormal, cfg_.init_method_std, true,
              ShardSpec{0, cfg_.vocab_size, false});
  if (cfg_.position_embedding == PositionEmbedding::kLearnedAbsolute)
    params_.add(n.wpe, {cfg_.max_positions(), C}, InitKind::kNormal, cfg_.init_method_std, true);
  for (int l = 0; l < cfg_.num_layers; ++l) TransformerLayer::declare(params_, cfg_, l);
  Norm::declare(params_, n.final_norm, cfg_);
  if (cfg_.untie_embeddings_and_output_weights)
    params_.add(n.head, {padded_vocab_, C}, InitKind::kNormal, cfg_.init_method_std, true,
                ShardSpec{0, cfg_.vocab_size, false});
  params_.allocate(compute_dtype, seed);

  wte_ = params_.get(n.wte).value;
  dwte_ = params_.get(n.wte).grad;
  if (params_.contains(n.wpe)) {
    wpe_ = params_.get(n.wpe).value;
    dwpe_ = params_.get(n.wpe).grad;
  }
  layers_.reserve(cfg_.num_layers);
  for (int l = 0; l < cfg_.num_layers; ++l) layers_.emplace_back(params_, cfg_, l);
  final_norm_ = std::make_unique<Norm>(params_, n.final_norm, cfg_);
  head_w_ = cfg_.untie_embeddings_and_output_weights ? params_.get(n.head).value : wte_;
  dhead_w_ = cfg_.untie_embeddings_and_output_weights ? params_.get(n.head).grad : dwte_;
}

// Site id of the embedding dropout: after the layers' 2L sites.
Tensor GPTModel::embed(const Batch& batch, const StepContext& ctx) const {
  const int64_t N = batch.B * batch.T, C = cfg_.hidden_size;
  Tensor x = Tensor::empty({N, C}, params_.compute_dtype());
  const std::vector<int32_t> pos = token_positions(batch, ctx);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::embedding_forward(x.data<T>(), batch.tokens, pos.data(), wte_.data<T>(),
                               wpe_.defined() ? wpe_.data<T>() : nullptr, N, C, 0, padded_vocab_);
    const float p = ctx.training ? cfg_.hidden_dropout : 0.0f;
    if (p > 0.0f)
      kernels::dropout_forward(x.data<T>(), x.data<T>(),
                               ctx.dropout_key(RngPurpose::kHiddenDropout, 2 * cfg_.num_layers),
                               ctx.coords, N, C, p);
  });
  return x;
}

void GPTModel::embed_backward(const Tensor& dx, const Batch& batch, const StepContext& ctx) {
  const int64_t N = batch.B * batch.T, C = cfg_.hidden_size;
  const std::vector<int32_t> pos = token_positions(batch, ctx);
  visit_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = const_cast<T*>(dx.data<T>());  // dx is ours: the last use of the embedding gradient
    const float p = ctx.training ? cfg_.hidden_dropout : 0.0f;
    if (p > 0.0f)
      kernels::dropout_backward(d, d, ctx.dropout_key(RngPurpose::kHiddenDropout, 2 * cfg_.num_layers),
                                ctx.coords, N, C, p);
    kernels::embedding_backward(dwte_.data<float>(), dwpe_.defined() ? dwpe_.data<float>() : nullptr,
                                d, batch.tokens, pos.data(), N, C, 0, padded_vocab_);
  });
}

LossSum GPTModel::head(const Tensor& x, const Batch& batch, float grad_scale, Tensor* dx) {
  const int64_t N = batch.B * batch.T;
  Norm::Saved ns;
  Tensor h = final_norm_->forward(x, ns);
  Linear out(head_w_, dhead_w_, Tensor(), Tensor());
  Tensor logits = out.forward(h);
  std::vector<float> losses(N);
  const bool backward = dx != nullptr;
  visit_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // The logits buffer becomes its own gradient: one (N, V) buffer instead of two.
    kernels::cross_entropy_forward_backward(losses.data(), backward ? logits.data<T>() : nullptr,
                                            logits.data<T>(), batch.targets, batch.loss_mask, N,
                                            padded_vocab_, cfg_.vocab_size, grad_scale);
  });
  LossSum sum;
  for (int64_t i = 0; i < N; ++i) {
    sum.loss_sum += losses[i];
    sum.tokens += batch.loss_mask ? batch.loss_mask[i] : 1.0f;
  }
  if (backward) *dx = final_norm_->backward(out.backward(logits, h), ns);
  return sum;
}

LossSum GPTModel::forward_backward(const Batch& batch, const StepContext& ctx, float grad_scale) {
  std::vector<TransformerLayer::Saved> saved(layers_.size());
  Tensor x = embed(batch, ctx);
  for (size_t l = 0; l < layers_.size(); ++l) x = layers_[l].forward(x, saved[l], ctx);
  Tensor dx;
  LossSum sum = head(x, batch, grad_scale, &dx);
  x = Tensor();
  for (size_t l = layers_.size(); l-- > 0;) {
    dx = layers_[l].backward(dx, saved[l], ctx);
    saved[l] = TransformerLayer::Saved();  // free this layer's activations now
  }
  embed_backward(dx, batch, ctx);
  return sum;
}

LossSum GPTModel::forward_loss(const Batch& batch, const StepContext& ctx) {
  Tensor x = embed(batch, ctx);
  for (const auto& layer : layers_) {
    TransformerLayer::Saved s;
    x = layer.forward(x, s, ctx);
  }
  return head(x, batch, 0.0f, nullptr);
}

}  // namespace tessera::model
