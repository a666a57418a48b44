// The decoder-only language model: embeddings, L transformer layers, final norm, output layer
// (tied to the token embedding unless --untie-embeddings-and-output-weights) and the loss.
//
// Parameters live in one ParameterSet (flat compute-dtype values, flat fp32 grads) with
// Hugging Face names of the config's family. forward_backward() accumulates into the grads;
// the caller zeroes them between optimizer steps.
//
// Tensor parallel (Megatron's layout): the token embedding is vocab-parallel (rows padded to a
// multiple of --make-vocab-size-divisible-by x T, rank r holding rows [r*V/T, (r+1)*V/T)), the
// layers split heads and MLP features, and the output layer (tied to the embedding shard, or
// its own column-parallel lm_head) feeds vocab-parallel cross-entropy, so the full logits never
// exist on one rank. Every TP rank runs the same micro-batches; after the last one the trainer
// completes the gradients with distributed::TensorParallelGrads.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tessera/model/config.h"
#include "tessera/model/context.h"
#include "tessera/model/norm.h"
#include "tessera/model/parameter.h"
#include "tessera/model/transformer_layer.h"
#include "tessera/parallel/tensor_parallel.h"

namespace tessera::model {

// One micro-batch of B sequences of T tokens (row-major (B, T) arrays, owned by the caller).
struct Batch {
  const int32_t* tokens = nullptr;   // (B, T) input ids in [0, vocab_size)
  const int32_t* targets = nullptr;  // (B, T) next-token ids in [0, vocab_size)
  const float* loss_mask = nullptr;  // (B, T) or nullptr (every token counts)
  int64_t B = 0, T = 0;
};

struct LossSum {
  double loss_sum = 0.0;  // sum over counted tokens of -log p(target)
  double tokens = 0.0;    // number of counted tokens (sum of the loss mask)
};

// Lets ZeRO stage 3 materialise a unit's parameters just before they are used and drop them
// after. Units: 0 = the embeddings, 1..L = the layers, L + 1 = the final norm and output layer;
// GPTModel::units() gives their flat ranges. Every acquire(u) is matched by a release(u); a unit
// may be acquired again before it is released (the tied embedding in the output layer).
// begin_pass() announces the order of the acquisitions to come: a forward pass visits units
// 0, 1, ..., L + 1 (the head, whose forward and backward are one step, also acquires unit 0
// when tied), a backward pass L down to 1 (the embedding's backward reads no parameter values).
class ParamAccess {
 public:
  virtual ~ParamAccess() = default;
  virtual void begin_pass(bool backward) = 0;
  virtual void acquire(int unit) = 0;
  virtual void release(int unit) = 0;
};

class GPTModel {
 public:
  // Validates cfg (and its fit to the TP size; tessera::Error on bad options), declares and
  // initialises this rank's parameter shards. `tp` is copied; with the default, one process.
  // With flat_multiple > 1 every unit (see ParamAccess) is padded to a multiple of
  // `flat_multiple` elements, so data-parallel shards can split each unit evenly.
  GPTModel(const ModelConfig& cfg, DType compute_dtype, uint64_t seed,
           const parallel::TensorParallel& tp = {}, int64_t flat_multiple = 1);
  GPTModel(const GPTModel&) = delete;  // layers point at tp_
  GPTModel& operator=(const GPTModel&) = delete;

  const ModelConfig& config() const { return cfg_; }
  ParameterSet& params() { return params_; }
  const ParameterSet& params() const { return params_; }
  int64_t padded_vocab() const { return padded_vocab_; }
  const parallel::TensorParallel& tensor_parallel() const { return tp_; }
  // The step context of a micro-batch for this model's TP layout (its sequence slice under SP).
  StepContext context(int64_t B, int64_t T, int64_t sample_offset, uint64_t seed, int64_t iteration,
                      bool training) const;

  // Forward and backward of one micro-batch (the whole batch on every TP rank; ctx from
  // context()). Parameter grads accumulate
  // grad_scale * d(loss_sum)/d(param); the caller sets grad_scale = loss_scale / tokens in the
  // global batch so that accumulated grads are those of the global mean loss.
  LossSum forward_backward(const Batch& batch, const StepContext& ctx, float grad_scale);
  // Called during forward_backward() (when set) each time the gradients at every flat offset
  // >= `offset` are final for this micro-batch: after the output layer, after each layer's
  // backward (its first parameter's offset), and 0 after the embedding. The data-parallel
  // reducer starts reducing buckets from it while backward continues.
  void set_grads_ready_hook(std::function<void(int64_t offset)> hook) {
    grads_ready_ = std::move(hook);
  }

  // The flat range [first, second) of every unit (see ParamAccess), in order.
  const std::vector<std::pair<int64_t, int64_t>>& units() const { return units_; }
  // Acquire/release calls around every use of a unit's parameters (nullptr: none). Not owned.
  void set_param_access(ParamAccess* access) { access_ = access; }

  // Forward only (evaluation): no gradients, nothing kept.
  LossSum forward_loss(const Batch& batch, const StepContext& ctx);

 private:
  // Embedding, layers and head (the head's backward too when dx is given, the layers keeping
  // their Saved in *saved); each unit acquired around its use.
  LossSum forward_pass(const Batch& batch, const StepContext& ctx, float grad_scale,
                       std::vector<TransformerLayer::Saved>* saved, Tensor* dx);
  Tensor embed(const Batch& batch, const StepContext& ctx) const;
  void embed_backward(const Tensor& dx, const Batch& batch, const StepContext& ctx);
  // Final norm, logits and cross-entropy. With grad_scale > 0 also returns d(hidden).
  LossSum head(const Tensor& x, const Batch& batch, float grad_scale, Tensor* dx);

  ModelConfig cfg_;
  parallel::TensorParallel tp_;
  int64_t padded_vocab_, vocab_start_, vocab_local_;  // this rank's rows of the padded vocabulary
  ParameterSet params_;
  std::vector<TransformerLayer> layers_;
  std::unique_ptr<Norm> final_norm_;
  Tensor wte_, dwte_, wpe_, dwpe_, head_w_, dhead_w_;
  std::vector<int64_t> layer_offsets_;  // flat offset of each layer's first parameter
  int64_t head_offset_ = 0;             // flat offset of the final norm (then the output layer)
  std::function<void(int64_t)> grads_ready_;
  std::vector<std::pair<int64_t, int64_t>> units_;
  ParamAccess* access_ = nullptr;
};

}  // namespace tessera::model
