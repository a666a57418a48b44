#include "tessera/model/gpt_model.h"

#include "tessera/kernels/cross_entropy.h"
#include "tessera/kernels/dropout.h"
#include "tessera/kernels/embedding.h"
#include "tessera/model/parallel_linear.h"
#include "tessera/parallel/vocab_parallel_cross_entropy.h"

namespace tessera::model {
namespace {

struct TopNames {
  std::string wte, wpe, final_norm, head;
};

TopNames top_names(const ModelConfig& cfg) {
  if (cfg.family() == Family::kGpt2)
    return {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f",
            "lm_head.weight"};
  return {"model.embed_tokens.weight", "model.embed_positions.weight", "model.norm",
          "lm_head.weight"};
}

// Holds a unit's parameters for its scope (ParamAccess).
class UnitUse {
 public:
  UnitUse(ParamAccess* access, int unit) : access_(access), unit_(unit) {
    if (access_) access_->acquire(unit_);
  }
  ~UnitUse() {
    if (access_) access_->release(unit_);
  }
  UnitUse(const UnitUse&) = delete;
  UnitUse& operator=(const UnitUse&) = delete;

 private:
  ParamAccess* access_;
  int unit_;
};

// The position of every residual-stream row (ctx.local_N() of them), row-major.
std::vector<int32_t> token_positions(const StepContext& ctx) {
  std::vector<int32_t> pos(ctx.local_N());
  for (size_t i = 0; i < pos.size(); ++i) {
    const int64_t b = static_cast<int64_t>(i) / ctx.seq_local;
    const int64_t t = ctx.seq_begin + static_cast<int64_t>(i) % ctx.seq_local;
    pos[i] = ctx.sample_positions.empty() ? ctx.positions[t] : ctx.sample_positions[b * ctx.T + t];
  }
  return pos;
}

}  // namespace

GPTModel::GPTModel(const ModelConfig& cfg, DType compute_dtype, uint64_t seed,
                   const parallel::TensorParallel& tp, int64_t flat_multiple)
    : cfg_(cfg), tp_(tp), params_(tp.size(), tp.rank()) {
  cfg_.validate();
  cfg_.validate_tensor_parallel(tp_.size(), tp_.sequence_parallel());
  padded_vocab_ = cfg_.padded_vocab_size(tp_.size());
  vocab_local_ = padded_vocab_ / tp_.size();
  vocab_start_ = tp_.rank() * vocab_local_;
  const TopNames n = top_names(cfg_);
  const int64_t C = cfg_.hidden_size;
  const ShardSpec vocab_parallel = ShardSpec::vocab(cfg_.vocab_size);
  params_.add(n.wte, {padded_vocab_, C}, InitKind::kNormal, cfg_.init_method_std, true,
              vocab_parallel);
  if (cfg_.position_embedding == PositionEmbedding::kLearnedAbsolute)
    params_.add(n.wpe, {cfg_.max_positions(), C}, InitKind::kNormal, cfg_.init_method_std, true);
  params_.pad_to(flat_multiple);
  units_.push_back({0, params_.numel()});
  for (int l = 0; l < cfg_.num_layers; ++l) {
    layer_offsets_.push_back(params_.numel());
    TransformerLayer::declare(params_, cfg_, l);
    params_.pad_to(flat_multiple);
    units_.push_back({layer_offsets_.back(), params_.numel()});
  }
  head_offset_ = params_.numel();
  Norm::declare(params_, n.final_norm, cfg_);
  if (cfg_.untie_embeddings_and_output_weights)
    params_.add(n.head, {padded_vocab_, C}, InitKind::kNormal, cfg_.init_method_std, true,
                vocab_parallel);
  params_.pad_to(flat_multiple);
  units_.push_back({head_offset_, params_.numel()});
  params_.allocate(compute_dtype, seed, flat_multiple);

  wte_ = params_.get(n.wte).value;
  dwte_ = params_.get(n.wte).grad;
  if (params_.contains(n.wpe)) {
    wpe_ = params_.get(n.wpe).value;
    dwpe_ = params_.get(n.wpe).grad;
  }
  layers_.reserve(cfg_.num_layers);
  for (int l = 0; l < cfg_.num_layers; ++l) layers_.emplace_back(params_, cfg_, l, &tp_);
  final_norm_ = std::make_unique<Norm>(params_, n.final_norm, cfg_);
  head_w_ = cfg_.untie_embeddings_and_output_weights ? params_.get(n.head).value : wte_;
  dhead_w_ = cfg_.untie_embeddings_and_output_weights ? params_.get(n.head).grad : dwte_;
}

StepContext GPTModel::context(int64_t B, int64_t T, int64_t sample_offset, uint64_t seed,
                              int64_t iteration, bool training) const {
  return StepContext::make(B, T, sample_offset, seed, iteration, training, tp_.seq_begin(T),
                           tp_.seq_local(T));
}

// Vocab-parallel lookup (each rank adds its rows; the sum over TP is the embedding, reduced into
// the residual stream's rows), then positions and dropout on those rows. The dropout site id
// comes after the layers' 2L sites.
Tensor GPTModel::embed(const Batch& batch, const StepContext& ctx) const {
  const int64_t N = batch.B * batch.T, C = cfg_.hidden_size;
  Tensor x = Tensor::empty({N, C}, params_.compute_dtype());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::embedding_forward(x.data<T>(), batch.tokens, nullptr, wte_.data<T>(),
                               static_cast<const T*>(nullptr), N, C, vocab_start_, vocab_local_);
  });
  x = tp_.row_output_forward(x, batch.B);
  const std::vector<int32_t> pos = token_positions(ctx);
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (wpe_.defined())
      kernels::position_embedding_forward(x.data<T>(), pos.data(), wpe_.data<T>(), x.dim(0), C);
    const float p = ctx.training ? cfg_.hidden_dropout : 0.0f;
    if (p > 0.0f)
      kernels::dropout_forward(x.data<T>(), x.data<T>(),
                               ctx.dropout_key(RngPurpose::kHiddenDropout, 2 * cfg_.num_layers),
                               ctx.coords, x.dim(0), C, p);
  });
  return x;
}

void GPTModel::embed_backward(const Tensor& dx, const Batch& batch, const StepContext& ctx) {
  const int64_t N = batch.B * batch.T, C = cfg_.hidden_size;
  const std::vector<int32_t> pos = token_positions(ctx);
  visit_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = const_cast<T*>(dx.data<T>());  // dx is ours: the last use of the embedding gradient
    const float p = ctx.training ? cfg_.hidden_dropout : 0.0f;
    if (p > 0.0f)
      kernels::dropout_backward(d, d,
                                ctx.dropout_key(RngPurpose::kHiddenDropout, 2 * cfg_.num_layers),
                                ctx.coords, dx.dim(0), C, p);
    if (dwpe_.defined())
      kernels::embedding_backward(nullptr, dwpe_.data<float>(), d, nullptr, pos.data(), dx.dim(0),
                                  C, 0, 0);
  });
  const Tensor dfull = tp_.row_output_backward(dx, batch.B);
  visit_float(dfull.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::embedding_backward(dwte_.data<float>(), nullptr, dfull.data<T>(), batch.tokens,
                                nullptr, N, C, vocab_start_, vocab_local_);
  });
}

LossSum GPTModel::head(const Tensor& x, const Batch& batch, float grad_scale, Tensor* dx) {
  const int64_t N = batch.B * batch.T;
  Norm::Saved ns;
  Tensor h = final_norm_->forward(x, ns);
  ColumnParallelLinear out(Linear(head_w_, dhead_w_, Tensor(), Tensor()), &tp_);
  Tensor h_full;
  Tensor logits = out.forward(h, batch.B, &h_full);
  std::vector<float> losses(N);
  const bool backward = dx != nullptr;
  visit_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // The logits buffer becomes its own gradient: one (N, V/T) buffer instead of two.
    T* dlogits = backward ? logits.data<T>() : nullptr;
    if (tp_.size() == 1) {
      kernels::cross_entropy_forward_backward(losses.data(), dlogits, logits.data<T>(),
                                              batch.targets, batch.loss_mask, N, padded_vocab_,
                                              cfg_.vocab_size, grad_scale);
    } else {
      parallel::vocab_parallel_cross_entropy_forward_backward(
          losses.data(), dlogits, logits.data<T>(), batch.targets, batch.loss_mask, N, vocab_start_,
          vocab_local_, cfg_.vocab_size, grad_scale, *tp_.group());
    }
  });
  LossSum sum;
  for (int64_t i = 0; i < N; ++i) {
    sum.loss_sum += losses[i];
    sum.tokens += batch.loss_mask ? batch.loss_mask[i] : 1.0f;
  }
  if (backward) *dx = final_norm_->backward(out.backward(logits, h_full, batch.B), ns);
  return sum;
}

LossSum GPTModel::forward_pass(const Batch& batch, const StepContext& ctx, float grad_scale,
                               std::vector<TransformerLayer::Saved>* saved, Tensor* dx) {
  const int L = static_cast<int>(layers_.size());
  if (access_) access_->begin_pass(false);
  Tensor x;
  {
    UnitUse use(access_, 0);
    x = embed(batch, ctx);
  }
  for (int l = 0; l < L; ++l) {
    UnitUse use(access_, l + 1);
    TransformerLayer::Saved scratch;  // evaluation keeps nothing
    x = layers_[l].forward(x, saved ? (*saved)[l] : scratch, ctx);
  }
  UnitUse use_head(access_, L + 1);
  UnitUse use_embedding(cfg_.untie_embeddings_and_output_weights ? nullptr : access_, 0);
  return head(x, batch, grad_scale, dx);
}

LossSum GPTModel::forward_backward(const Batch& batch, const StepContext& ctx, float grad_scale) {
  std::vector<TransformerLayer::Saved> saved(layers_.size());
  Tensor dx;
  const LossSum sum = forward_pass(batch, ctx, grad_scale, &saved, &dx);
  if (access_) access_->begin_pass(true);  // the head's forward and backward ran together above
  if (grads_ready_) grads_ready_(head_offset_);
  for (size_t l = layers_.size(); l-- > 0;) {
    {
      UnitUse use(access_, static_cast<int>(l) + 1);
      dx = layers_[l].backward(dx, saved[l], ctx);
    }
    saved[l] = TransformerLayer::Saved();  // free this layer's activations now
    if (grads_ready_) grads_ready_(layer_offsets_[l]);
  }
  embed_backward(dx, batch, ctx);  // writes gradients only: no parameter values needed
  if (grads_ready_) grads_ready_(0);
  return sum;
}

LossSum GPTModel::forward_loss(const Batch& batch, const StepContext& ctx) {
  return forward_pass(batch, ctx, 0.0f, nullptr, nullptr);
}

}  // namespace tessera::model
