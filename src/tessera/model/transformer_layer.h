// One pre-norm transformer layer:
//   r = x + dropout(attn(norm1(x)));  out = r + dropout(mlp(norm2(r)))
// where mlp is the dense MLP, or the MoE block in the layers --moe-layer-freq chooses.
// forward() fills a Saved with exactly what backward() needs; a pipeline can hold several
// Saved at once, and recomputation can drop one and rebuild it from `x` alone.
#pragma once

#include <string>

#include "tessera/model/attention.h"
#include "tessera/model/mlp.h"
#include "tessera/model/moe_layer.h"
#include "tessera/model/norm.h"

namespace tessera::model {

class TransformerLayer {
 public:
  struct Saved {
    Norm::Saved norm1, norm2;
    Attention::Saved attn;
    Mlp::Saved mlp;
    MoeLayer::Saved moe;
    Tensor residual;  // r, the input of norm2
  };

  // The HF prefix of layer `index`: "transformer.h.3" or "model.layers.3".
  static std::string prefix(const ModelConfig& cfg, int index);
  // Without `with_experts`, an MoE layer's experts are left to the caller
  // (MoeLayer::declare_experts: under expert parallelism they are a unit of their own).
  static void declare(ParameterSet& params, const ModelConfig& cfg, int index,
                      bool with_experts = true);
  // `expert_group`: the expert-parallel group (nullptr: every expert on this rank); `cp`: the
  // context-parallel group (nullptr: none); `experts_whole`: expert tensor parallelism 1 under
  // TP > 1 (MoeLayer).
  TransformerLayer(ParameterSet& params, const ModelConfig& cfg, int index,
                   const parallel::TensorParallel* tp,
                   comm::ProcessGroup* expert_group = nullptr,
                   const context::ContextParallel* cp = nullptr, bool experts_whole = false);

  // x (N, C) -> (N, C), N = ctx.local_N() residual-stream rows
  Tensor forward(const Tensor& x, Saved& s, const StepContext& ctx) const;
  // dout (N, C) -> dx (N, C); accumulates parameter gradients.
  Tensor backward(const Tensor& dout, const Saved& s, const StepContext& ctx) const;
  // Inference: the new tokens of `seqs` through the layer over the KV cache
  // (Attention::forward_cached); ctx is an evaluation context; nothing kept.
  Tensor forward_cached(const Tensor& x, const StepContext& ctx, const KvBlocks& cache,
                        const std::vector<CachedSequence>& seqs) const;
  // Selective recomputation of the attention core (Attention::set_recompute_core).
  void set_recompute_core_attention(bool on) { attn_.set_recompute_core(on); }
  // The attention's and the MLP's weights quantized for inference (Linear::quantize): the dense
  // MLP, or an MoE block's experts and shared expert (MoeLayer::quantize, not its router); the
  // norms stay as they are.
  void quantize(const WeightQuantizer& quantizer) {
    attn_.quantize(quantizer);
    for (Mlp& m : mlp_) m.quantize(quantizer);
    for (MoeLayer& m : moe_) m.quantize(quantizer);
  }
  int index() const { return index_; }  // global layer index
  // The MoE block, or nullptr in a dense layer.
  MoeLayer* moe() { return moe_.empty() ? nullptr : &moe_[0]; }
  const MoeLayer* moe() const { return moe_.empty() ? nullptr : &moe_[0]; }

 private:
  Tensor dropout_add(const Tensor& residual, const Tensor& branch, int site,
                     const StepContext& ctx) const;
  Tensor dropout_backward(const Tensor& d, int site, const StepContext& ctx) const;

  int index_;
  float hidden_dropout_;
  Norm norm1_, norm2_;
  Attention attn_;
  std::vector<Mlp> mlp_;       // one in a dense layer
  std::vector<MoeLayer> moe_;  // one in an MoE layer
};

}  // namespace tessera::model
