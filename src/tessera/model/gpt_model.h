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
//
// The model only computes: the embeddings, one layer, the head, each forward and backward, and
// the structure (chunks, units, offsets) a runner walks. Parameter acquisition (ZeRO 3),
// activation recomputation and gradient-readiness hooks are applied around these units by
// model::ChunkRunner (chunk_runner.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "tessera/model/config.h"
#include "tessera/model/context.h"
#include "tessera/model/embedding_row_grads.h"
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

// Which part of the model a pipeline rank builds: its model chunks as layer ranges (in local
// chunk order, see pipeline/schedule.h), whether its first chunk starts with the embeddings and
// whether its last chunk ends with the final norm, output layer and loss. The default is the
// whole model in one chunk.
// Under expert parallelism (ep_size > 1; or experts_whole) the rank holds experts [ep_rank * E/ep,
// (ep_rank + 1) * E/ep) of every MoE layer, declared after the layer's other parameters as a unit
// of their own (their gradients are reduced over the expert-data-parallel group).
struct ModelPart {
  std::vector<std::pair<int, int>> chunks;  // [first layer, end layer) per chunk; empty: all
  bool embedding = true;
  bool head = true;
  int ep_size = 1, ep_rank = 0;
  // Expert tensor parallelism 1 (--expert-tensor-parallel-size 1): every expert whole on its
  // rank, not split over TP, and (under TP > 1) the tensor-parallel ranks share the experts'
  // rows (model/moe_layer.h). The experts are then a unit of their own even at EP 1: their
  // gradients are reduced over the expert-data-parallel group, which spans the TP ranks.
  bool experts_whole = false;
};

class GPTModel {
 public:
  // Validates cfg (and its fit to the TP size; tessera::Error on bad options), declares and
  // initialises this rank's parameter shards of `part` (default: the whole model) from `seed`.
  // `seed` std::nullopt initialises nothing: every value reads zero (untouched pages) until the
  // caller writes it, for a model whose values are all loaded next (inference::load_model);
  // drawing the random values first would cost minutes at a billion parameters. `tp` is
  // copied; with the default, one process. With flat_multiple > 1 every unit (see ParamAccess)
  // is padded to a multiple of `flat_multiple` elements, so data-parallel shards can split each
  // unit evenly (and the tied embedding's parts line up on the first and last stage).
  // `resident` (when set) maps the units to the flat ranges this rank initialises; the rest is
  // zero and not resident (ZeRO 3's parts, distributed::Zero3Params::resident_ranges). It is
  // told which units are experts' (units of their own, which ZeRO 3 shards over the expert-data-
  // parallel group instead of the data-parallel one).
  using ResidentRanges = std::function<std::vector<std::pair<int64_t, int64_t>>(
      const std::vector<std::pair<int64_t, int64_t>>& units, const std::vector<bool>& expert)>;
  // `expert_group`: the expert-parallel group (part.ep_size ranks, this rank at part.ep_rank),
  // through which MoE layers exchange tokens; nullptr when part.ep_size is 1.
  // `cp`: the context-parallel group and each layer's communication type (default: none);
  // micro-batches then hold this rank's chunks of every sequence (context() takes their T).
  GPTModel(const ModelConfig& cfg, DType compute_dtype, std::optional<uint64_t> seed,
           const parallel::TensorParallel& tp = {}, int64_t flat_multiple = 1, ModelPart part = {},
           const ResidentRanges& resident = nullptr,
           std::shared_ptr<comm::ProcessGroup> expert_group = nullptr,
           context::ContextParallel cp = {});
  GPTModel(const GPTModel&) = delete;  // layers point at tp_
  GPTModel& operator=(const GPTModel&) = delete;

  // The parameters of `part` for rank tp_rank of tp_size, declared only (names, shapes, shards;
  // no memory): what another pipeline stage holds, for exports and checkpoints.
  static ParameterSet declare_part(const ModelConfig& cfg, int tp_size, int tp_rank,
                                   const ModelPart& part);

  const ModelConfig& config() const { return cfg_; }
  ParameterSet& params() { return params_; }
  const ParameterSet& params() const { return params_; }
  int64_t padded_vocab() const { return padded_vocab_; }
  const parallel::TensorParallel& tensor_parallel() const { return tp_; }
  const context::ContextParallel& context_parallel() const { return cp_; }
  // The step context of a micro-batch of B samples of T tokens (this rank's chunks of each
  // sequence under CP) for this model's TP layout (its sequence slice under SP).
  StepContext context(int64_t B, int64_t T, int64_t sample_offset, uint64_t seed, int64_t iteration,
                      bool training) const;

  int num_chunks() const { return static_cast<int>(part_.chunks.size()); }
  // Chunk `chunk`'s local layers [first, end) (indices into this rank's layers) and whether it
  // starts with the embeddings and ends with the final norm, output layer and loss.
  struct ChunkShape {
    int first = 0, end = 0;
    bool embeds = false, head = false;
  };
  ChunkShape chunk_shape(int chunk) const;
  // The model's index of local layer l (in chunk `chunk`): its position in the whole model.
  int global_layer(int chunk, int l) const {
    return part_.chunks[chunk].first + (l - chunk_shape(chunk).first);
  }

  // The flat range [first, second) of every unit (see ParamAccess, chunk_runner.h), in order,
  // and the units each part of the model reads: the embeddings, local layer l, the head (which
  // includes the word embedding when it is tied and on this rank).
  const std::vector<std::pair<int64_t, int64_t>>& units() const { return layout_.units; }
  const std::vector<int>& embed_units() const { return layout_.embed_units; }
  // Local layer l's units: its own, then its experts' when they are a unit of their own.
  const std::vector<int>& layer_units(int l) const { return layout_.layer_units[l]; }
  const std::vector<int>& head_units() const { return layout_.head_units; }
  // Under expert parallelism: the flat ranges of this rank's experts (units of their own, in
  // increasing order); empty otherwise.
  const std::vector<std::pair<int64_t, int64_t>>& expert_ranges() const {
    return layout_.expert_ranges;
  }
  // One flag per unit (units()): whether it is one of those experts' units.
  const std::vector<bool>& expert_units() const { return layout_.expert_units; }
  // Flat offset of local layer l's first parameter, and of the head's first unit: from there on
  // the gradients are final once that part's backward is done.
  int64_t layer_offset(int l) const { return layout_.layer_offsets[l]; }
  int64_t head_offset() const { return layout_.head_offset; }

  // The flat range of the word embedding this rank holds when tied embeddings are split over
  // a pipeline (the first stage's embedding, or the last stage's copy; a unit of its own), else
  // {0, 0}. Its gradient is summed over the embedding group before the optimizer step.
  std::pair<int64_t, int64_t> tied_embedding_range() const { return layout_.tied_range; }
  // The flat range of the word embedding (this rank's vocabulary rows) when this rank's part
  // holds the embeddings, else {0, 0}; each of its rows is hidden_size elements.
  std::pair<int64_t, int64_t> word_embedding_range() const;

  // The units' arithmetic. Each needs its unit's parameters in place (under ZeRO 3, acquired:
  // ChunkRunner does that). Parameter grads accumulate (+=) grad_scale * d(loss_sum)/d(param).
  // Embeddings: vocab-parallel lookup, positions and dropout of this rank's rows (ctx.local_N()).
  Tensor embed(const Batch& batch, const StepContext& ctx) const;
  // Consumes `dx`: its buffer is overwritten (the last use of the embedding gradient). With
  // `rows`, the word embedding's gradient goes there as the rows its tokens touched, and its
  // flat gradient is not written (model/embedding_row_grads.h).
  void embed_backward(Tensor dx, const Batch& batch, const StepContext& ctx,
                      EmbeddingRowGrads* rows = nullptr);
  // Local layer l; `saved` receives what its backward needs (a scratch one keeps nothing).
  Tensor layer_forward(int l, const Tensor& x, TransformerLayer::Saved& saved,
                       const StepContext& ctx);
  Tensor layer_backward(int l, const Tensor& dy, TransformerLayer::Saved& saved,
                        const StepContext& ctx);
  // Final norm, logits and cross-entropy. With dx (grad_scale > 0) also the gradient of x.
  LossSum head(const Tensor& x, const Batch& batch, float grad_scale, Tensor* dx);
  // The head without the loss: final norm and output layer of x (N, C), the last chunk's
  // forward output, for B samples -> logits (N, V) in the compute dtype, V this rank's padded
  // vocabulary columns (all of them in one process). For inspection and comparisons with other
  // implementations (tessera-logits); no gradients, nothing kept. Up to kernels::kGemvMaxRows
  // rows on the matrix-vector kernel (kernels/gemv.h), as forward_cached.
  Tensor logits(const Tensor& x, int64_t B) const;
  // Inference over a KV cache (model/kv_cache_view.h; one process or TP without SP, the whole
  // model on this rank): the hidden states (n, C) after the last layer of n new tokens `tokens`
  // at `positions` (each below max_positions()), the rows of `seqs` in order; every layer writes
  // their keys and values into `cache` and attends over their sequence's cached tokens. The
  // head: logits() of the rows wanted. Linear layers of at most kernels::kGemvMaxRows rows (a
  // decode step) run on the matrix-vector kernel (kernels/gemv.h), not the GEMMs training uses.
  Tensor forward_cached(const int32_t* tokens, const int32_t* positions, int64_t n,
                        const KvBlocks& cache, const std::vector<CachedSequence>& seqs);
  // Selective recomputation: every layer drops its attention core's output and log-sum-exp and
  // recomputes them in backward (RecomputePolicy, chunk_runner.h).
  void set_selective_recompute(bool on);
  // Inference with weight-only quantization (quant/quantized_matrix.h): every layer's linear
  // weights (TransformerLayer::quantize), and the output layer's when `output_layer`, are
  // quantized from their current values; the embedding and the norms stay. This rank's shards
  // under TP. After this the model only runs forward.
  void quantize_weights(quant::QuantFormat format, int64_t group, bool output_layer);
  // The same layers given their weights by `quantizer` (Linear::quantize): the names it sees are
  // the bound parameters' (q/k/v, gate/up fused in that order) and "lm_head.weight" for the
  // output layer, tied or not. How a quantized directory installs its stored codes, and how the
  // converter learns which weights quantize_weights quantizes.
  void quantize_weights(const WeightQuantizer& quantizer, bool output_layer);

  // Forward and backward of one micro-batch (the whole batch on every TP rank; ctx from
  // context()) through the whole model (one chunk with embeddings and head), with no policies:
  // ChunkRunner(*this).forward_backward. Not for a model built with resident ranges (ZeRO 3:
  // its parameters are not in place without a runner's ParamAccess; tessera::Error). Parameter
  // grads accumulate grad_scale * d(loss_sum)/d(param); the caller sets grad_scale = loss_scale /
  // tokens in the global batch so that accumulated grads are those of the global mean loss.
  LossSum forward_backward(const Batch& batch, const StepContext& ctx, float grad_scale);
  // Forward only through the whole model (evaluation): no gradients, nothing kept.
  LossSum forward_loss(const Batch& batch, const StepContext& ctx);

  // This rank's MoE blocks and their global layer indices, in layer order (none when dense).
  std::vector<std::pair<int, MoeLayer*>> moe_layers();

  // How many times each local layer's forward has run: training and evaluation forwards, and
  // the reruns of activation recomputation in backward (so tests can see that it happened).
  const std::vector<int64_t>& layer_forward_counts() const { return layer_forwards_; }

 private:
  // Where declare() put things: units and their roles, layer offsets, the tied embedding.
  struct Layout {
    std::vector<std::pair<int64_t, int64_t>> units;  // flat range of every unit, in order
    std::vector<int> embed_units, head_units;        // the units each part acquires
    std::vector<std::vector<int>> layer_units;       // per local layer
    std::vector<int> chunk_begin;        // index in layers_ of each chunk's first layer (+ the end)
    std::vector<int64_t> layer_offsets;  // flat offset of each local layer's first parameter
    int64_t head_offset = 0;             // flat offset of the head's first unit
    std::pair<int64_t, int64_t> tied_range{0, 0};            // tied_embedding_range()
    std::vector<std::pair<int64_t, int64_t>> expert_ranges;  // expert_ranges()
    std::vector<bool> expert_units;                          // expert_units()
  };
  // Declares the parameters of `part` into `params` and says where they went. An empty chunk
  // list means the whole model: `part` is completed to one chunk of every layer.
  static Layout declare(ParameterSet& params, const ModelConfig& cfg, ModelPart& part,
                        int64_t padded_vocab, int64_t flat_multiple);

  ModelConfig cfg_;
  parallel::TensorParallel tp_;
  context::ContextParallel cp_;  // layers point at it
  std::shared_ptr<comm::ProcessGroup> expert_group_;
  ModelPart part_;
  Layout layout_;
  int64_t padded_vocab_, vocab_start_, vocab_local_;  // this rank's rows of the padded vocabulary
  ParameterSet params_;
  std::vector<TransformerLayer> layers_;
  std::vector<int64_t> layer_forwards_;  // layer_forward_counts()
  bool partly_resident_ = false;         // built with resident ranges (ZeRO 3)
  std::unique_ptr<Norm> final_norm_;
  // The output layer over head_w_ (its quantized form when there is one).
  ColumnParallelLinear output_layer() const;
  std::optional<ColumnParallelLinear> quantized_head_;  // the output layer, when quantized
  Tensor wte_, dwte_, wpe_, dwpe_, head_w_, dhead_w_;
};

}  // namespace tessera::model
