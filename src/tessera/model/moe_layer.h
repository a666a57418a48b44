// The Mixture-of-Experts block that takes the MLP's place in an MoE layer (Megatron-Core's
// MoELayer with its TopKRouter and a grouped expert MLP), over the N rows of one micro-batch:
//
//   logits = x W_r^T                 (N, E), fp32 (x and W_r widened) or fp64 (--moe-router-dtype)
//   routing = moe::route(logits)     each token's k experts and weights (moe/router.h)
//   rows = permute(x)                expert-major copies, capacity applied (moe/permute.h)
//   rows[e] = expert_e(rows[e])      one MLP per expert over its contiguous rows (two GEMMs)
//   y = unpermute(rows, weights) + shared_expert(x)
//
// Load balancing adds terms to the objective, not to the reported LM loss: the Switch aux loss
// (over the micro-batch, or per sequence for seq_aux_loss) and the z-loss, each scaled in
// backward by StepContext::moe_aux_loss_scale (the loss scale over the number of micro-batches
// in the global batch, so the objective is the LM loss plus each auxiliary loss averaged over
// micro-batches, as Megatron's MoEAuxLossAutoScaler does). The routing, the capacity and both
// losses are computed over the micro-batch's tokens, whatever the layout.
//
// Aux-loss-free balancing (--moe-router-enable-expert-bias): an fp32 bias per expert, held here
// (not a trained parameter), added to the sigmoid scores only to choose the experts; after each
// step the trainer calls update_expert_bias() with the global batch's counts.
//
// Parameter names: Mixtral's (block_sparse_moe.gate, experts.N.w1/w3/w2) for LLaMA-family
// models with softmax routing and no shared expert, DeepSeek-V3's (mlp.gate,
// mlp.experts.N.gate_proj/up_proj/down_proj, mlp.shared_experts) for the other LLaMA-family
// ones, GPT-2 style ones (mlp.gate, mlp.experts.N.c_fc/c_proj, mlp.shared_experts) otherwise.
// Expert parallelism: with an expert group of EP ranks, this rank holds experts
// [r*E/EP, (r+1)*E/EP) and exchanges rows with the others through moe/token_dispatcher.h (the
// routing, capacity and losses stay this rank's micro-batch's).
// Tensor parallelism (expert tensor parallelism = TP, Megatron's default): every TP rank runs the
// block on the whole micro-batch (gathered from the sequence slices under --sequence-parallel)
// with the same routing (without SP, TP rank 0's router logits are broadcast: the replicated
// input need not be bitwise equal on every rank); the experts and the shared expert are split
// like the dense MLP (column/row parallel, their outputs all-reduced over TP), so every TP rank
// ends with the same output and takes its rows. The router and the replicated biases get whole
// gradients on every rank (Parameter::tp_complete).
//
// Expert tensor parallelism 1 under TP > 1 (--expert-tensor-parallel-size 1, Megatron's
// "parallel folding"): every expert is whole on its rank and the TP ranks fold into the expert
// grid (expert-parallel groups may be made of TP ranks). The TP ranks still route the whole
// micro-batch alike, but each computes the expert rows of its own share of the tokens only (its
// sequence slice under SP, else a 1/TP block of rows; moe::keep_tokens) and exchanges them over
// its expert-parallel group; the shares' outputs, router logit gradients and (without SP) input
// gradients are summed over TP, where each element comes from one rank (the others add zero),
// so the sum is exact. The shared expert stays split over TP like the dense MLP.
//
// Context parallelism: a rank's micro-batch is its chunks of every sequence; routing is per token
// and stays local, while the balancing losses need the whole micro-batch's expert counts (per
// sequence for seq_aux_loss), all-reduced over the CP group in forward, and its token count, so
// each rank adds its tokens' share of the single process's losses and gradients. (Capacity,
// which ranks tokens across the micro-batch, is refused with CP by the arguments.)
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/model/config.h"
#include "tessera/model/context.h"
#include "tessera/model/mlp.h"
#include "tessera/moe/permute.h"
#include "tessera/moe/token_dispatcher.h"

namespace tessera::model {

// What the backward passes of an MoE layer saw since the last MoeLayer::take_stats(): one entry
// per training micro-batch.
struct MoeLayerStats {
  int64_t micro_batches = 0;
  double aux_loss = 0;                // sum over micro-batches (coefficient included)
  double z_loss = 0;                  // likewise
  int64_t choices = 0;                // routed (token, expert) pairs
  int64_t dropped = 0;                // of them, dropped by the capacity
  std::vector<int64_t> expert_count;  // (E) choices per expert before the capacity
  void add(const MoeLayerStats& o);
};

class MoeLayer {
 public:
  struct Saved {
    Tensor inp;                 // (N, C) the block's input, the whole micro-batch
    std::vector<float> logits;  // (N, E) fp32 router logits
    moe::Routing routing;
    moe::Permutation perm;
    moe::Permutation own;    // expert TP 1 under TP: this TP rank's share of perm's rows
    moe::DispatchPlan plan;  // expert parallelism: the row exchange
    Tensor rows_out;         // (rows, C) the experts' outputs, this rank's expert-major order
    std::vector<Mlp::Saved> experts;
    Mlp::Saved shared;
    double aux_loss = 0, z_loss = 0;  // this micro-batch's (coefficients included)
    // Under CP: the whole micro-batch's expert counts, (E) or per sequence (B, E).
    std::vector<int64_t> cp_counts;
  };

  // The HF prefix of the MoE block of layer prefix `layer` ("...block_sparse_moe" or "...mlp").
  static std::string block_prefix(const std::string& layer, const ModelConfig& cfg);
  // The router and the shared expert, and with `with_experts` every expert.
  static void declare(ParameterSet& params, const std::string& layer, const ModelConfig& cfg,
                      bool with_experts = true);
  // Experts [ep_rank * E/ep_size, (ep_rank + 1) * E/ep_size), marked Parameter::expert when
  // ep_size > 1 or `whole`; with `whole` (expert tensor parallelism 1) not split over TP and
  // marked Parameter::tp_distinct.
  static void declare_experts(ParameterSet& params, const std::string& layer,
                              const ModelConfig& cfg, int ep_size = 1, int ep_rank = 0,
                              bool whole = false);
  // `expert_group` (may be nullptr: all experts here): the expert-parallel group; `cp_group`
  // (may be nullptr): the context-parallel group the micro-batch's sequences are split over;
  // `experts_whole`: expert tensor parallelism 1 under TP > 1 (the experts declared whole).
  MoeLayer(ParameterSet& params, const std::string& layer, const ModelConfig& cfg,
           const parallel::TensorParallel* tp, comm::ProcessGroup* expert_group = nullptr,
           comm::ProcessGroup* cp_group = nullptr, bool experts_whole = false);

  // x: (N, C) rows of ctx.B samples -> (N, C).
  Tensor forward(const Tensor& x, Saved& s, const StepContext& ctx) const;
  // dy (N, C) -> dx (N, C); accumulates parameter gradients and records the micro-batch's
  // statistics (backward runs once per training micro-batch, recomputation or not).
  Tensor backward(const Tensor& dy, const Saved& s, const StepContext& ctx) const;

  // Inference with weight-only quantization: every local expert's and the shared expert's
  // weights quantized (Mlp::quantize; inference builds no expert-parallel group, so there every
  // expert is local, split over TP like the dense MLP); the router stays in its dtype, since choosing the experts
  // from coarser logits would change which weights run, not only their precision (llama.cpp's
  // quantizer skips ffn_gate_inp, the router, likewise). Forward then multiplies by the codes;
  // backward refuses.
  void quantize(const WeightQuantizer& quantizer) {
    for (Mlp& e : experts_) e.quantize(quantizer);
    for (Mlp& s : shared_) s.quantize(quantizer);
  }

  MoeLayerStats take_stats() const;
  // b_e += rate * sign(mean count - count_e), counts (E) over the whole global batch
  // (DeepSeek-V3's aux-loss-free balancing). No-op unless the expert bias is enabled.
  void update_expert_bias(const std::vector<int64_t>& counts);
  const std::vector<float>& expert_bias() const { return expert_bias_; }
  void set_expert_bias(const std::vector<float>& bias);

 private:
  // The aux (or sequence aux) loss and the z-loss of s's routing, their coefficients times
  // `scale`; with dlogits, += their gradients. B: sequences in the micro-batch.
  std::pair<double, double> balancing_losses(const Saved& s, int64_t B, double scale,
                                             float* dlogits) const;
  // logits (N, E) from x (N, C) in the router's dtype.
  void router_logits(const Tensor& x, std::vector<float>& logits) const;
  // The local experts over their contiguous rows (expert_begin: El + 1 offsets) -> their outputs.
  Tensor experts_forward(const Tensor& rows, const std::vector<int64_t>& expert_begin,
                         std::vector<Mlp::Saved>& saved) const;
  Tensor experts_backward(const Tensor& drows, const std::vector<int64_t>& expert_begin,
                          const std::vector<Mlp::Saved>& saved) const;

  MoeConfig moe_;
  int64_t C_;
  // This TP rank's share of the micro-batch's tokens (fold_ only): the rows of its experts'
  // computation it sends, and the output rows it keeps.
  std::vector<char> owned_tokens(const StepContext& ctx, int64_t N) const;
  // The permutation whose rows this rank computes: its share under fold_, else all of them.
  const moe::Permutation& rows_of(const Saved& s) const { return fold_ ? s.own : s.perm; }

  const parallel::TensorParallel* tp_ = nullptr;  // the model's (maybe sequence-parallel)
  // The TP group without sequence parallelism, for the shared expert (its rows are the gathered
  // micro-batch, not a sequence slice), and the experts' own: the same, or one rank when the
  // experts are whole (expert tensor parallelism 1).
  std::unique_ptr<parallel::TensorParallel> shared_tp_, expert_tp_;
  // Expert tensor parallelism 1 under TP > 1: every TP rank routes the whole micro-batch alike
  // but computes (and exchanges over EP) only its share of the tokens' expert rows.
  bool fold_ = false;
  Tensor router_w_;           // (E, C) compute dtype
  mutable Tensor router_dw_;  // its fp32 grad (backward() is const but accumulates into it)
  std::vector<Mlp> experts_;  // the local ones
  comm::ProcessGroup* expert_group_ = nullptr;
  comm::ProcessGroup* cp_group_ = nullptr;  // size > 1 only
  std::vector<Mlp> shared_;                 // zero or one
  std::vector<float> expert_bias_;
  mutable MoeLayerStats stats_;
};

}  // namespace tessera::model
