#include "tessera/model/gpt_model.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/kernels/cross_entropy.h"
#include "tessera/kernels/dropout.h"
#include "tessera/kernels/embedding.h"
#include "tessera/kernels/gemv.h"
#include "tessera/model/chunk_runner.h"
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

// The position of every residual-stream row (ctx.local_N() of them), row-major.
std::vector<int32_t> token_positions(const StepContext& ctx) {
  std::vector<int32_t> pos(ctx.local_N());
  for (size_t i = 0; i < pos.size(); ++i) {
    const int64_t b = static_cast<int64_t>(i) / ctx.seq_local;
    const int64_t t = ctx.seq_begin + static_cast<int64_t>(i) % ctx.seq_local;
    pos[i] = ctx.sample_positions ? ctx.sample_positions[b * ctx.T + t] : ctx.positions[t];
  }
  return pos;
}

}  // namespace

GPTModel::Layout GPTModel::declare(ParameterSet& params, const ModelConfig& cfg, ModelPart& part,
                                   int64_t padded_vocab, int64_t flat_multiple) {
  if (part.chunks.empty()) part.chunks = {{0, cfg.num_layers}};
  Layout out;
  const TopNames n = top_names(cfg);
  const int64_t C = cfg.hidden_size;
  const ShardSpec vocab_parallel = ShardSpec::vocab(cfg.vocab_size);
  const bool tied = !cfg.untie_embeddings_and_output_weights;
  // Tied embeddings split over a pipeline: the word embedding (first stage) and its copy (last
  // stage) are units of their own, equally padded, so both stages' data-parallel ranks own the
  // same elements of it and can sum their parts of its gradient directly.
  const bool split_tied = tied && part.embedding != part.head;
  auto close_unit = [&](int64_t begin, std::vector<int>& role) {
    params.pad_to(flat_multiple);
    if (params.numel() == begin) return;
    role.push_back(static_cast<int>(out.units.size()));
    out.units.push_back({begin, params.numel()});
  };
  if (part.embedding) {
    params
        .add(n.wte, {padded_vocab, C}, InitKind::kNormal, cfg.init_method_std, true, vocab_parallel)
        .embedding_or_output = true;
    if (split_tied) {
      close_unit(0, out.embed_units);
      out.tied_range = out.units.back();
    }
    const int64_t begin = params.numel();
    if (cfg.position_embedding == PositionEmbedding::kLearnedAbsolute)
      params.add(n.wpe, {cfg.max_positions(), C}, InitKind::kNormal, cfg.init_method_std, true);
    close_unit(split_tied ? begin : 0, out.embed_units);
  }
  const std::vector<bool> moe_layer = cfg.moe_layer_mask();
  for (const auto& [first, end] : part.chunks) {
    out.chunk_begin.push_back(static_cast<int>(out.layer_offsets.size()));
    for (int l = first; l < end; ++l) {
      out.layer_offsets.push_back(params.numel());
      const bool split_experts = (part.ep_size > 1 || part.experts_whole) && moe_layer[l];
      TransformerLayer::declare(params, cfg, l, !split_experts);
      out.layer_units.emplace_back();
      close_unit(out.layer_offsets.back(), out.layer_units.back());
      if (split_experts) {  // this rank's experts: a unit of their own
        const int64_t begin = params.numel();
        MoeLayer::declare_experts(params, TransformerLayer::prefix(cfg, l), cfg, part.ep_size,
                                  part.ep_rank, part.experts_whole);
        close_unit(begin, out.layer_units.back());
        out.expert_ranges.push_back(out.units.back());
        out.expert_units.resize(out.units.size(), false);
        out.expert_units.back() = true;
      }
    }
  }
  out.chunk_begin.push_back(static_cast<int>(out.layer_offsets.size()));
  if (part.head) {
    out.head_offset = params.numel();
    Norm::declare(params, n.final_norm, cfg);
    if (!tied)
      params
          .add(n.head, {padded_vocab, C}, InitKind::kNormal, cfg.init_method_std, true,
               vocab_parallel)
          .embedding_or_output = true;
    close_unit(out.head_offset, out.head_units);
    if (split_tied) {
      // The same name, so the same initial values as the first stage's embedding.
      const int64_t begin = params.numel();
      Parameter& copy = params.add(n.wte, {padded_vocab, C}, InitKind::kNormal, cfg.init_method_std,
                                   true, vocab_parallel);
      copy.tied_copy = true;
      copy.embedding_or_output = true;
      close_unit(begin, out.head_units);
      out.tied_range = out.units.back();
    } else if (tied) {
      out.head_units.push_back(out.embed_units.front());  // the output layer reads the embedding
    }
  }
  out.expert_units.resize(out.units.size(), false);
  return out;
}

std::vector<std::pair<int, MoeLayer*>> GPTModel::moe_layers() {
  std::vector<std::pair<int, MoeLayer*>> out;
  for (TransformerLayer& layer : layers_)
    if (layer.moe() != nullptr) out.emplace_back(layer.index(), layer.moe());
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

ParameterSet GPTModel::declare_part(const ModelConfig& cfg, int tp_size, int tp_rank,
                                    const ModelPart& part) {
  ParameterSet params(tp_size, tp_rank);
  ModelPart p = part;
  declare(params, cfg, p, cfg.padded_vocab_size(tp_size), 1);
  return params;
}

GPTModel::GPTModel(const ModelConfig& cfg, DType compute_dtype, std::optional<uint64_t> seed,
                   const parallel::TensorParallel& tp, int64_t flat_multiple, ModelPart part,
                   const ResidentRanges& resident,
                   std::shared_ptr<comm::ProcessGroup> expert_group, context::ContextParallel cp)
    : cfg_(cfg), tp_(tp), cp_(std::move(cp)), expert_group_(std::move(expert_group)),
      part_(std::move(part)), params_(tp.size(), tp.rank()) {
  cfg_.validate();
  cfg_.validate_tensor_parallel(tp_.size(), tp_.sequence_parallel());
  cfg_.validate_expert_parallel(part_.ep_size);
  TESSERA_CHECK((part_.ep_size > 1) == (expert_group_ != nullptr));
  TESSERA_CHECK(!expert_group_ || (expert_group_->size() == part_.ep_size &&
                                   expert_group_->rank() == part_.ep_rank));
  padded_vocab_ = cfg_.padded_vocab_size(tp_.size());
  vocab_local_ = padded_vocab_ / tp_.size();
  vocab_start_ = tp_.rank() * vocab_local_;
  const TopNames n = top_names(cfg_);
  const bool tied = !cfg_.untie_embeddings_and_output_weights;
  layout_ = declare(params_, cfg_, part_, padded_vocab_, flat_multiple);
  partly_resident_ = static_cast<bool>(resident);
  if (!seed) {
    const std::vector<std::pair<int64_t, int64_t>> nothing;
    params_.allocate(compute_dtype, 0, flat_multiple, &nothing);
  } else if (resident) {
    const auto ranges = resident(layout_.units, layout_.expert_units);
    params_.allocate(compute_dtype, *seed, flat_multiple, &ranges);
  } else {
    params_.allocate(compute_dtype, *seed, flat_multiple);
  }

  if (params_.contains(n.wte)) {
    wte_ = params_.get(n.wte).value;
    dwte_ = params_.get(n.wte).grad;
  }
  if (params_.contains(n.wpe)) {
    wpe_ = params_.get(n.wpe).value;
    dwpe_ = params_.get(n.wpe).grad;
  }
  layers_.reserve(layout_.layer_offsets.size());
  for (const auto& [first, end] : part_.chunks)
    for (int l = first; l < end; ++l)
      layers_.emplace_back(params_, cfg_, l, &tp_, expert_group_.get(), &cp_, part_.experts_whole);
  layer_forwards_.assign(layers_.size(), 0);
  if (part_.head) {
    final_norm_ = std::make_unique<Norm>(params_, n.final_norm, cfg_);
    head_w_ = tied ? wte_ : params_.get(n.head).value;
    dhead_w_ = tied ? dwte_ : params_.get(n.head).grad;
  }
}

void GPTModel::set_selective_recompute(bool on) {
  for (TransformerLayer& layer : layers_) layer.set_recompute_core_attention(on);
}

GPTModel::ChunkShape GPTModel::chunk_shape(int chunk) const {
  ChunkShape c;
  c.first = layout_.chunk_begin[chunk];
  c.end = layout_.chunk_begin[chunk + 1];
  c.embeds = chunk == 0 && part_.embedding;
  c.head = chunk == num_chunks() - 1 && part_.head;
  return c;
}

Tensor GPTModel::layer_forward(int l, const Tensor& x, TransformerLayer::Saved& saved,
                               const StepContext& ctx) {
  ++layer_forwards_[l];
  return layers_[l].forward(x, saved, ctx);
}

Tensor GPTModel::layer_backward(int l, const Tensor& dy, TransformerLayer::Saved& saved,
                                const StepContext& ctx) {
  return layers_[l].backward(dy, saved, ctx);
}

Tensor GPTModel::forward_cached(const int32_t* tokens, const int32_t* positions, int64_t n,
                                const KvBlocks& cache, const std::vector<CachedSequence>& seqs) {
  TESSERA_CHECK_MSG(num_chunks() == 1 && chunk_shape(0).embeds && chunk_shape(0).head &&
                        cp_.size() == 1 && !tp_.sequence_parallel() && !partly_resident_,
                    "cached inference needs the whole model on every rank (no PP, CP, SP, ZeRO 3)");
  // One sample of n rows, each at its own position (per-sample positions, as packed documents).
  StepContext ctx = StepContext::make(1, n, 0, 0, 0, /*training=*/false);
  ctx.sample_positions = positions;
  ctx.seq_global = cfg_.max_positions();
  const Batch batch{tokens, nullptr, nullptr, 1, n};
  const kernels::ScopedGemvLinear few_rows;  // a decode step's linears stream their weights
  Tensor x = embed(batch, ctx);
  for (const TransformerLayer& layer : layers_) x = layer.forward_cached(x, ctx, cache, seqs);
  return x;
}

StepContext GPTModel::context(int64_t B, int64_t T, int64_t sample_offset, uint64_t seed,
                              int64_t iteration, bool training) const {
  return StepContext::make(B, T, sample_offset, seed, iteration, training, tp_.seq_begin(T),
                           tp_.seq_local(T), cp_.split());
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

std::pair<int64_t, int64_t> GPTModel::word_embedding_range() const {
  if (!part_.embedding) return {0, 0};
  const Parameter& p = params_.get(top_names(cfg_).wte);
  return {p.offset, p.offset + p.numel()};
}

void GPTModel::embed_backward(Tensor dx, const Batch& batch, const StepContext& ctx,
                              EmbeddingRowGrads* rows) {
  const int64_t N = batch.B * batch.T, C = cfg_.hidden_size;
  const std::vector<int32_t> pos = token_positions(ctx);
  visit_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = dx.data<T>();  // consumed: the last use of the embedding gradient
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
  if (rows) {
    // The same kernel over a table of just the touched rows: each row still receives its
    // tokens' gradients in token order, from zero.
    std::vector<int32_t> local;
    rows->collect(batch.tokens, N, vocab_start_, vocab_local_, local);
    rows->grad = Tensor::zeros({static_cast<int64_t>(rows->rows.size()), C}, DType::kF32,
                               MemoryCategory::kComm);
    visit_float(dfull.dtype(), [&](auto tag) {
      using T = decltype(tag);
      kernels::embedding_backward(rows->grad.data<float>(), nullptr, dfull.data<T>(), local.data(),
                                  nullptr, N, C, 0, rows->grad.dim(0));
    });
    rows->filled = true;
    return;
  }
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
  const ColumnParallelLinear out = output_layer();
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

Tensor GPTModel::logits(const Tensor& x, int64_t B) const {
  const kernels::ScopedGemvLinear few_rows;  // inference: a decode step's head streams its weights
  Norm::Saved ns;
  const Tensor h = final_norm_->forward(x, ns);
  const ColumnParallelLinear out = output_layer();
  Tensor h_full;
  return out.forward(h, B, &h_full);
}

ColumnParallelLinear GPTModel::output_layer() const {
  if (quantized_head_) return *quantized_head_;
  // Its backward follows its forward at once (head()): the gathered input is kept, not gathered
  // twice.
  return ColumnParallelLinear(Linear(head_w_, dhead_w_, Tensor(), Tensor()), &tp_,
                              ColumnParallelLinear::KeptInput::kGathered);
}

void GPTModel::quantize_weights(quant::QuantFormat format, int64_t group, bool output_layer) {
  quantize_weights(quantize_values(format, group), output_layer);
}

void GPTModel::quantize_weights(const WeightQuantizer& quantizer, bool output_layer) {
  for (TransformerLayer& layer : layers_) layer.quantize(quantizer);
  if (output_layer && head_w_.defined()) {
    Linear head(head_w_, Tensor(), Tensor(), Tensor());
    head.set_weight_names({"lm_head.weight"});  // one name whether tied to the embedding or not
    quantized_head_ =
        ColumnParallelLinear(std::move(head), &tp_, ColumnParallelLinear::KeptInput::kGathered);
    quantized_head_->quantize(quantizer);
  }
}

LossSum GPTModel::forward_backward(const Batch& batch, const StepContext& ctx, float grad_scale) {
  TESSERA_CHECK_MSG(!partly_resident_, "a ZeRO 3 model runs through a ChunkRunner with its access");
  return ChunkRunner(*this).forward_backward(batch, ctx, grad_scale);
}

LossSum GPTModel::forward_loss(const Batch& batch, const StepContext& ctx) {
  TESSERA_CHECK_MSG(!partly_resident_, "a ZeRO 3 model runs through a ChunkRunner with its access");
  return ChunkRunner(*this).forward_loss(batch, ctx);
}

}  // namespace tessera::model
