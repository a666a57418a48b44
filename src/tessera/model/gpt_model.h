// The decoder-only language model: embeddings, L transformer layers, final norm, output layer
// (tied to the token embedding unless --untie-embeddings-and-output-weights) and the loss.
//
// Parameters live in one ParameterSet (flat compute-dtype values, flat fp32 grads) with
// Hugging Face names of the config's family. forward_backward() accumulates into the grads;
// the caller zeroes them between optimizer steps.
#pragma once

#include <memory>
#include <vector>

#include "tessera/model/config.h"
#include "tessera/model/context.h"
#include "tessera/model/norm.h"
#include "tessera/model/parameter.h"
#include "tessera/model/transformer_layer.h"

namespace tessera::model {

// One micro-batch of B sequences of T tokens (row-major (B, T) arrays, owned by the caller).
struct Batch {
  const int32_t* tokens = nullptr;     // (B, T) input ids in [0, vocab_size)
  const int32_t* targets = nullptr;    // (B, T) next-token ids in [0, vocab_size)
  const float* loss_mask = nullptr;    // (B, T) or nullptr (every token counts)
  int64_t B = 0, T = 0;
};

struct LossSum {
  double loss_sum = 0.0;  // sum over counted tokens of -log p(target)
  double tokens = 0.0;    // number of counted tokens (sum of the loss mask)
};

class GPTModel {
 public:
  // Validates cfg (tessera::Error on bad options), declares and initialises the parameters.
  GPTModel(const ModelConfig& cfg, DType compute_dtype, uint64_t seed);

  const ModelConfig& config() const { return cfg_; }
  ParameterSet& params() { return params_; }
  const ParameterSet& params() const { return params_; }
  int64_t padded_vocab() const { return padded_vocab_; }

  // Forward and backward of one micro-batch. Parameter grads accumulate
  // grad_scale * d(loss_sum)/d(param); the caller sets grad_scale = loss_scale / tokens in the
  // global batch so that accumulated grads are those of the global mean loss.
  LossSum forward_backward(const Batch& batch, const StepContext& ctx, float grad_scale);
  // Forward only (evaluation): no gradients, nothing kept.
  LossSum forward_loss(const Batch& batch, const StepContext& ctx);

 private:
  Tensor embed(const Batch& batch, const StepContext& ctx) const;
  void embed_backward(const Tensor& dx, const Batch& batch, const StepContext& ctx);
  // Final norm, logits and cross-entropy. With grad_scale > 0 also returns d(hidden).
  LossSum head(const Tensor& x, const Batch& batch, float grad_scale, Tensor* dx);

  ModelConfig cfg_;
  int64_t padded_vocab_;
  ParameterSet params_;
  std::vector<TransformerLayer> layers_;
  std::unique_ptr<Norm> final_norm_;
  Tensor wte_, dwte_, wpe_, dwpe_, head_w_, dhead_w_;
};

}  // namespace tessera::model
