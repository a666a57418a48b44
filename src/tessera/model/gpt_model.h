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
// after. A unit is a range of the flat buffers (GPTModel::units()): the embeddings, each layer,
// the final norm and output layer; when a pipeline splits tied embeddings, the word embedding
// (first stage) and its copy (last stage) are units of their own. Every acquire(u) is matched by
// a release(u); a unit may be acquired again before it is released (the tied embedding in the
// output layer). begin_pass() announces the units the next pass acquires, in order (a chunk's
// forward: its embeddings and layers; its backward: the head, the layers in reverse), so the
// next one can be fetched while the current one computes.
class ParamAccess {
 public:
  virtual ~ParamAccess() = default;
  // `order` is valid during the call only.
  virtual void begin_pass(const std::vector<int>& order) = 0;
  virtual void acquire(int unit) = 0;
  virtual void release(int unit) = 0;
};

// Which part of the model a pipeline rank builds: its model chunks as layer ranges (in local
// chunk order, see pipeline/schedule.h), whether its first chunk starts with the embeddings and
// whether its last chunk ends with the final norm, output layer and loss. The default is the
// whole model in one chunk.
struct ModelPart {
  std::vector<std::pair<int, int>> chunks;  // [first layer, end layer) per chunk; empty: all
  bool embedding = true;
  bool head = true;
};

// Activation recomputation (Megatron's --recompute-granularity/-method/-num-layers).
//   full, uniform: the layers of each chunk are taken in groups of `num_layers`; a group keeps
//     only its input and reruns its forward during backward.
//   full, block: the first `num_layers` layers of each chunk keep only their input, each
//     recomputed alone; the others keep everything.
//   selective: every layer drops its attention core's output and log-sum-exp and recomputes them
//     from the saved q, k, v in backward (the flash-style kernel keeps no T x T matrix anyway).
struct RecomputePolicy {
  enum class Granularity { kNone, kFull, kSelective } granularity = Granularity::kNone;
  enum class Method { kUniform, kBlock } method = Method::kUniform;
  int num_layers = 1;
};

// What one chunk keeps of one micro-batch between its forward and its backward.
struct ChunkActivations {
  std::vector<TransformerLayer::Saved> layers;  // per layer of the chunk (empty when recomputed)
  std::vector<Tensor> inputs;                   // per layer: its input, kept when recomputed
  Tensor output;  // the last chunk's final hidden states (the head runs in backward)
};

class GPTModel {
 public:
  // Validates cfg (and its fit to the TP size; tessera::Error on bad options), declares and
  // initialises this rank's parameter shards of `part` (default: the whole model). `tp` is
  // copied; with the default, one process. With flat_multiple > 1 every unit (see ParamAccess)
  // is padded to a multiple of `flat_multiple` elements, so data-parallel shards can split each
  // unit evenly (and the tied embedding's parts line up on the first and last stage).
  // `resident` (when set) maps the units to the flat ranges this rank initialises; the rest is
  // zero and not resident (ZeRO 3's parts, distributed::Zero3Params::resident_ranges).
  using ResidentRanges = std::function<std::vector<std::pair<int64_t, int64_t>>(
      const std::vector<std::pair<int64_t, int64_t>>& units)>;
  GPTModel(const ModelConfig& cfg, DType compute_dtype, uint64_t seed,
           const parallel::TensorParallel& tp = {}, int64_t flat_multiple = 1, ModelPart part = {},
           const ResidentRanges& resident = nullptr);
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
  // The step context of a micro-batch for this model's TP layout (its sequence slice under SP).
  StepContext context(int64_t B, int64_t T, int64_t sample_offset, uint64_t seed, int64_t iteration,
                      bool training) const;

  int num_chunks() const { return static_cast<int>(part_.chunks.size()); }
  void set_recompute(const RecomputePolicy& policy);

  // One chunk's forward for one micro-batch: `input` is the previous chunk's output (ignored by
  // the chunk holding the embeddings, which reads batch.tokens); returns this chunk's output
  // (ctx.local_N(), C): the final hidden states for the last chunk. With `keep` (training) the
  // chunk stores there what its backward needs; without, nothing is kept (evaluation).
  Tensor forward_chunk(int chunk, const Tensor& input, const Batch& batch, const StepContext& ctx,
                       ChunkActivations* keep);
  // That chunk's backward: `grad_output` is the gradient of its output (ignored by the last
  // chunk, which runs the final norm, output layer and loss here, adding them to *loss);
  // returns the gradient of its input (empty for the chunk holding the embeddings). Frees
  // `act` as it goes. Parameter grads accumulate as in forward_backward().
  Tensor backward_chunk(int chunk, const Tensor& grad_output, const Batch& batch,
                        const StepContext& ctx, float grad_scale, ChunkActivations& act,
                        LossSum* loss);
  // The loss of the final hidden states (the last chunk's forward output), no gradients.
  LossSum head_loss(const Tensor& hidden, const Batch& batch);

  // The flat range of the word embedding this rank holds when tied embeddings are split over
  // a pipeline (the first stage's embedding, or the last stage's copy; a unit of its own), else
  // {0, 0}. Its gradient is summed over the embedding group before the optimizer step.
  std::pair<int64_t, int64_t> tied_embedding_range() const { return layout_.tied_range; }

  // Forward and backward of one micro-batch (the whole batch on every TP rank; ctx from
  // context()) through the whole model (one chunk with embeddings and head). Parameter grads
  // accumulate
  // grad_scale * d(loss_sum)/d(param); the caller sets grad_scale = loss_scale / tokens in the
  // global batch so that accumulated grads are those of the global mean loss.
  LossSum forward_backward(const Batch& batch, const StepContext& ctx, float grad_scale);
  // Called during backward_chunk() (when set) each time the gradients at every flat offset
  // >= `offset` are final for this micro-batch, if this rank's part is one chunk: after the
  // output layer, after each layer's backward (its first parameter's offset), and 0 after the
  // embedding. The data-parallel
  // reducer starts reducing buckets from it while backward continues.
  void set_grads_ready_hook(std::function<void(int64_t offset)> hook) {
    grads_ready_ = std::move(hook);
  }

  // The flat range [first, second) of every unit (see ParamAccess), in order.
  const std::vector<std::pair<int64_t, int64_t>>& units() const { return layout_.units; }
  // Acquire/release calls around every use of a unit's parameters (nullptr: none). Not owned.
  void set_param_access(ParamAccess* access) { access_ = access; }

  // Forward only through the whole model (evaluation): no gradients, nothing kept.
  LossSum forward_loss(const Batch& batch, const StepContext& ctx);

  // How many times each local layer's forward has run: training and evaluation forwards, and
  // the reruns of activation recomputation in backward (so tests can see that it happened).
  const std::vector<int64_t>& layer_forward_counts() const { return layer_forwards_; }

 private:
  // Where declare() put things: units and their roles, layer offsets, the tied embedding.
  struct Layout {
    std::vector<std::pair<int64_t, int64_t>> units;         // flat range of every unit, in order
    std::vector<int> embed_units, layer_units, head_units;  // the units each part acquires
    std::vector<int> chunk_begin;        // index in layers_ of each chunk's first layer (+ the end)
    std::vector<int64_t> layer_offsets;  // flat offset of each local layer's first parameter
    int64_t head_offset = 0;             // flat offset of the head's first unit
    std::pair<int64_t, int64_t> tied_range{0, 0};  // tied_embedding_range()
  };
  // Declares the parameters of `part` into `params` and says where they went. An empty chunk
  // list means the whole model: `part` is completed to one chunk of every layer.
  static Layout declare(ParameterSet& params, const ModelConfig& cfg, ModelPart& part,
                        int64_t padded_vocab, int64_t flat_multiple);
  // Whether local layer l keeps only its input (full recompute), and the first layer of its
  // recompute group (the one whose input the group keeps).
  bool recomputed(int chunk, int l) const;
  int group_begin(int chunk, int l) const;
  Tensor embed(const Batch& batch, const StepContext& ctx) const;
  void embed_backward(const Tensor& dx, const Batch& batch, const StepContext& ctx);
  // Final norm, logits and cross-entropy. With grad_scale > 0 also returns d(hidden).
  LossSum head(const Tensor& x, const Batch& batch, float grad_scale, Tensor* dx);

  ModelConfig cfg_;
  parallel::TensorParallel tp_;
  ModelPart part_;
  RecomputePolicy recompute_;
  Layout layout_;
  // The units each chunk's passes acquire, in order (ParamAccess::begin_pass): per chunk, its
  // training forward, its evaluation forward (the last chunk's goes on to the head) and its
  // backward.
  struct PassOrders {
    std::vector<int> forward, evaluation, backward;
  };
  std::vector<PassOrders> pass_orders_;
  int64_t padded_vocab_, vocab_start_, vocab_local_;  // this rank's rows of the padded vocabulary
  ParameterSet params_;
  std::vector<TransformerLayer> layers_;
  std::vector<int64_t> layer_forwards_;  // layer_forward_counts()
  std::unique_ptr<Norm> final_norm_;
  Tensor wte_, dwte_, wpe_, dwpe_, head_w_, dhead_w_;
  std::function<void(int64_t)> grads_ready_;
  ParamAccess* access_ = nullptr;
};

}  // namespace tessera::model
