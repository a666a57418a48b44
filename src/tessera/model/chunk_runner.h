// Runs a GPTModel's chunks for one micro-batch and applies, around the model's units, the
// policies that are not its arithmetic:
//   - parameter acquisition (ParamAccess: ZeRO 3 gathers a unit before use, prefetches the next
//     units of the pass, and drops it after);
//   - full activation recomputation (RecomputePolicy: which layers keep only their input, and the
//     reruns of their forward in backward);
//   - gradient readiness (a hook told, after each unit's backward, from which flat offset on the
//     gradients are final, so the data-parallel reducer can start on those buckets).
// The model (gpt_model.h) only computes: embeddings, one layer, the head, each forward and
// backward. A new layer kind plugs into the model's layer_forward/layer_backward and is then
// acquired, recomputed and reported like any other unit; a new policy of this kind is a new
// member here, not a change to the model. The pipeline executor and the trainer drive the model
// through a runner; tests and benchmarks without policies use GPTModel::forward_backward.
#pragma once

#include <functional>
#include <vector>

#include "tessera/model/activation_probe.h"
#include "tessera/model/gpt_model.h"
#include "tessera/model/param_access.h"

namespace tessera::model {

// Activation recomputation (Megatron's --recompute-granularity/-method/-num-layers).
//   full, uniform: the layers of each chunk are taken in groups of `num_layers`; a group keeps
//     only its input and reruns its forward during backward.
//   full, block: the first `num_layers` layers of each chunk keep only their input, each
//     recomputed alone; the others keep everything.
//   selective: every layer drops its attention core's output and log-sum-exp and recomputes them
//     from the saved q, k, v in backward (the flash-style kernel keeps no T x T matrix anyway);
//     that one is the layer's own arithmetic (GPTModel::set_selective_recompute).
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

class ChunkRunner {
 public:
  // Runs `model` (not owned; it must outlive the runner) with no policies of its own until they
  // are set.
  explicit ChunkRunner(GPTModel& model);

  GPTModel& model() { return model_; }
  const GPTModel& model() const { return model_; }

  // Full recomputation is this runner's; selective recomputation is the layers' own arithmetic,
  // so this also switches the model's layers (GPTModel::set_selective_recompute), which stays
  // in effect for any other runner of the same model.
  void set_recompute(const RecomputePolicy& policy);
  const RecomputePolicy& recompute() const { return recompute_; }
  // Acquire/release calls around every use of a unit's parameters (nullptr: none). Not owned.
  void set_param_access(ParamAccess* access) { access_ = access; }
  // Shown every training pass's residual-stream tensors (nullptr: none). Not owned.
  void set_probe(ActivationProbe* probe) { probe_ = probe; }
  // Called during backward_chunk() (when set) each time the gradients at every flat offset
  // >= `offset` are final for this micro-batch, if this rank's part is one chunk: after the
  // output layer, after each layer's backward (its first parameter's offset), and 0 after the
  // embedding. The data-parallel reducer starts reducing buckets from it while backward continues.
  // With `rows` (only for a part that is one chunk holding the embeddings) the word embedding's
  // backward goes there instead of into its flat gradient (model/embedding_row_grads.h), so
  // that gradient is final from the first call on; rows->armed says so until the reducer
  // disarms it.
  void set_grads_ready_hook(std::function<void(int64_t offset)> hook,
                            EmbeddingRowGrads* rows = nullptr);

  // One chunk's forward for one micro-batch: `input` is the previous chunk's output (ignored by
  // the chunk holding the embeddings, which reads batch.tokens); returns this chunk's output
  // (ctx.local_N(), C): the final hidden states for the last chunk. With `keep` (training) the
  // chunk stores there what its backward needs; without, nothing is kept (evaluation).
  Tensor forward_chunk(int chunk, const Tensor& input, const Batch& batch, const StepContext& ctx,
                       ChunkActivations* keep);
  // That chunk's backward: `grad_output` is the gradient of its output (ignored by the last
  // chunk, which runs the final norm, output layer and loss here, adding them to *loss);
  // returns the gradient of its input (empty for the chunk holding the embeddings). Frees
  // `act` as it goes. Parameter grads accumulate as in GPTModel::forward_backward().
  Tensor backward_chunk(int chunk, const Tensor& grad_output, const Batch& batch,
                        const StepContext& ctx, float grad_scale, ChunkActivations& act,
                        LossSum* loss);
  // The loss of the final hidden states (the last chunk's forward output), no gradients.
  LossSum head_loss(const Tensor& hidden, const Batch& batch);

  // Forward and backward of one micro-batch through the whole model (one chunk with the
  // embeddings and the head), and forward only (evaluation).
  LossSum forward_backward(const Batch& batch, const StepContext& ctx, float grad_scale);
  LossSum forward_loss(const Batch& batch, const StepContext& ctx);

 private:
  // Whether local layer l keeps only its input (full recompute), and the first layer of its
  // recompute group (the one whose input the group keeps).
  bool recomputed(int chunk, int l) const;
  int group_begin(int chunk, int l) const;

  GPTModel& model_;
  RecomputePolicy recompute_;
  ParamAccess* access_ = nullptr;
  ActivationProbe* probe_ = nullptr;
  std::function<void(int64_t)> grads_ready_;
  EmbeddingRowGrads* embedding_rows_ = nullptr;  // with grads_ready_, or nullptr
  // The units each chunk's passes acquire, in order (ParamAccess::begin_pass): per chunk, its
  // training forward, its evaluation forward (the last chunk's goes on to the head) and its
  // backward.
  struct PassOrders {
    std::vector<int> forward, evaluation, backward;
  };
  std::vector<PassOrders> pass_orders_;
};

}  // namespace tessera::model
