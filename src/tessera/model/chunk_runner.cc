#include "tessera/model/chunk_runner.h"

#include <optional>

#include "tessera/core/error.h"

namespace tessera::model {
namespace {

// Holds a list of units' parameters for its scope: acquired in order, released in the same
// order. `units` must outlive it. Without an access (no ZeRO 3) it does nothing.
class UnitListUse {
 public:
  UnitListUse(ParamAccess* access, const std::vector<int>& units) : access_(access), units_(units) {
    if (access_)
      for (int u : units_) access_->acquire(u);
  }
  ~UnitListUse() {
    if (access_)
      for (int u : units_) access_->release(u);
  }
  UnitListUse(const UnitListUse&) = delete;
  UnitListUse& operator=(const UnitListUse&) = delete;

 private:
  ParamAccess* access_;
  const std::vector<int>& units_;
};

}  // namespace

ChunkRunner::ChunkRunner(GPTModel& model) : model_(model) {
  for (int chunk = 0; chunk < model_.num_chunks(); ++chunk) {
    const GPTModel::ChunkShape c = model_.chunk_shape(chunk);
    PassOrders o;
    if (c.embeds) o.forward = model_.embed_units();
    for (int l = c.first; l < c.end; ++l)
      for (int u : model_.layer_units(l)) o.forward.push_back(u);
    o.evaluation = o.forward;
    if (c.head) {
      o.evaluation.insert(o.evaluation.end(), model_.head_units().begin(),
                          model_.head_units().end());
      o.backward = model_.head_units();
    }
    for (int l = c.end; l-- > c.first;)
      for (int u : model_.layer_units(l)) o.backward.push_back(u);
    pass_orders_.push_back(std::move(o));
  }
}

void ChunkRunner::set_recompute(const RecomputePolicy& policy) {
  recompute_ = policy;
  model_.set_selective_recompute(policy.granularity == RecomputePolicy::Granularity::kSelective);
}

bool ChunkRunner::recomputed(int chunk, int l) const {
  if (recompute_.granularity != RecomputePolicy::Granularity::kFull) return false;
  if (recompute_.method == RecomputePolicy::Method::kUniform) return true;
  return l - model_.chunk_shape(chunk).first < recompute_.num_layers;
}

int ChunkRunner::group_begin(int chunk, int l) const {
  if (recompute_.method == RecomputePolicy::Method::kBlock) return l;
  const int first = model_.chunk_shape(chunk).first, n = recompute_.num_layers;
  return first + (l - first) / n * n;
}

Tensor ChunkRunner::forward_chunk(int chunk, const Tensor& input, const Batch& batch,
                                  const StepContext& ctx, ChunkActivations* keep) {
  const GPTModel::ChunkShape c = model_.chunk_shape(chunk);
  if (access_) {
    const PassOrders& o = pass_orders_[chunk];
    access_->begin_pass(keep ? o.forward : o.evaluation);
  }
  Tensor x = input;
  if (c.embeds) {
    UnitListUse use(access_, model_.embed_units());
    x = model_.embed(batch, ctx);
    if (probe_ && keep) probe_->forward_output(-1, x, ctx);
  }
  if (keep) {
    keep->layers.assign(c.end - c.first, TransformerLayer::Saved());
    keep->inputs.assign(c.end - c.first, Tensor());
  }
  for (int l = c.first; l < c.end; ++l) {
    UnitListUse use(access_, model_.layer_units(l));
    TransformerLayer::Saved scratch;  // evaluation, and recomputed layers, keep nothing
    const bool store = keep && !recomputed(chunk, l);
    // A recompute group keeps the input of its first layer only.
    if (keep && !store && group_begin(chunk, l) == l) keep->inputs[l - c.first] = x;
    x = model_.layer_forward(l, x, store ? keep->layers[l - c.first] : scratch, ctx);
    if (probe_ && keep) probe_->forward_output(model_.global_layer(chunk, l), x, ctx);
  }
  if (keep && c.head) keep->output = x;
  return x;
}

void ChunkRunner::set_grads_ready_hook(std::function<void(int64_t offset)> hook,
                                       EmbeddingRowGrads* rows) {
  TESSERA_CHECK_MSG(!rows || (hook && model_.num_chunks() == 1 && model_.chunk_shape(0).embeds),
                    "embedding rows need a readiness hook and a part of one chunk with the "
                    "embeddings");
  grads_ready_ = std::move(hook);
  embedding_rows_ = rows;
  if (rows) rows->armed = true;
}

Tensor ChunkRunner::backward_chunk(int chunk, const Tensor& grad_output, const Batch& batch,
                                   const StepContext& ctx, float grad_scale, ChunkActivations& act,
                                   LossSum* loss) {
  const GPTModel::ChunkShape c = model_.chunk_shape(chunk);
  // Readiness by flat offset holds only when this backward covers the whole local part.
  const bool report = grads_ready_ && model_.num_chunks() == 1;
  if (access_) access_->begin_pass(pass_orders_[chunk].backward);
  Tensor dx = grad_output;
  if (c.head) {
    UnitListUse use(access_, model_.head_units());
    const LossSum s = model_.head(act.output, batch, grad_scale, &dx);
    act.output = Tensor();
    if (loss) {
      loss->loss_sum += s.loss_sum;
      loss->tokens += s.tokens;
    }
    if (probe_) probe_->backward_input_grad(model_.config().num_layers, dx, ctx);
    if (report) grads_ready_(model_.head_offset());
  }
  for (int l = c.end; l-- > c.first;) {
    const int i = l - c.first;
    {
      UnitListUse use(access_, model_.layer_units(l));
      if (recomputed(chunk, l) && !act.layers[i].residual.defined()) {
        // Rerun the forward of l's recompute group from its saved input, keeping everything;
        // the dropout masks depend only on coordinates, so they come out the same.
        const int g = group_begin(chunk, l);
        Tensor x = act.inputs[g - c.first];
        act.inputs[g - c.first] = Tensor();
        for (int k = g; k <= l; ++k) {
          std::optional<UnitListUse> other;  // l itself is held already
          if (k != l) other.emplace(access_, model_.layer_units(k));
          x = model_.layer_forward(k, x, act.layers[k - c.first], ctx);
        }
      }
      dx = model_.layer_backward(l, dx, act.layers[i], ctx);
      if (probe_) probe_->backward_input_grad(model_.global_layer(chunk, l), dx, ctx);
    }
    act.layers[i] = TransformerLayer::Saved();  // free this layer's activations now
    if (report) grads_ready_(model_.layer_offset(l));
  }
  if (c.embeds) {
    // Writes gradients only: no parameter values needed.
    model_.embed_backward(dx, batch, ctx, report ? embedding_rows_ : nullptr);
    dx = Tensor();
    if (report) grads_ready_(0);
  }
  return dx;
}

LossSum ChunkRunner::head_loss(const Tensor& hidden, const Batch& batch) {
  UnitListUse use(access_, model_.head_units());
  return model_.head(hidden, batch, 0.0f, nullptr);
}

LossSum ChunkRunner::forward_backward(const Batch& batch, const StepContext& ctx,
                                      float grad_scale) {
  const GPTModel::ChunkShape c = model_.chunk_shape(0);
  TESSERA_CHECK_MSG(model_.num_chunks() == 1 && c.embeds && c.head,
                    "forward_backward() needs the whole model");
  ChunkActivations act;
  forward_chunk(0, Tensor(), batch, ctx, &act);
  LossSum sum;
  backward_chunk(0, Tensor(), batch, ctx, grad_scale, act, &sum);
  return sum;
}

LossSum ChunkRunner::forward_loss(const Batch& batch, const StepContext& ctx) {
  const GPTModel::ChunkShape c = model_.chunk_shape(0);
  TESSERA_CHECK_MSG(model_.num_chunks() == 1 && c.embeds && c.head,
                    "forward_loss() needs the whole model");
  return head_loss(forward_chunk(0, Tensor(), batch, ctx, nullptr), batch);
}

}  // namespace tessera::model
