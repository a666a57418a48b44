#include "tessera/model/activation_memory.h"

#include <algorithm>

#include "tessera/model/shard.h"
#include "tessera/moe/permute.h"

namespace tessera::model {

MoeRows balanced_moe_rows(const ModelConfig& c, int64_t N, int ep, int expert_tp, int fold_tp) {
  const MoeConfig& m = c.moe;
  const double choices = static_cast<double>(N) * m.topk;
  double padding = 0, kept = choices;
  if (m.capacity_factor > 0) {
    const double capacity =
        static_cast<double>(moe::expert_capacity(N, m.topk, m.num_experts, m.capacity_factor));
    kept = std::min(choices, capacity * m.num_experts);  // balanced: each expert N k / E
    if (m.pad_to_capacity) padding = capacity * m.num_experts - kept;
  }
  MoeRows r;
  r.permuted = kept / fold_tp + padding;
  r.local = r.permuted;  // balanced: as many rows arrive as leave
  r.per_expert = r.local / (m.num_experts / ep);
  r.expert_tp = expert_tp;
  r.exchanged = ep > 1;
  return r;
}

namespace {

// An expert's (or the shared expert's) MLP columns on this rank: the activation's and the up
// projection's (gate and value for SwiGLU).
struct MlpColumns {
  double act, up;
};
MlpColumns mlp_columns(const ModelConfig& c, int ffn, int tp) {
  const double F = ffn / static_cast<double>(tp);
  return {F, c.swiglu ? 2 * F : F};
}

}  // namespace

double layer_activation_bytes(const ModelConfig& c, int64_t N, DType dtype,
                              RecomputePolicy::Granularity granularity, int tp,
                              bool sequence_parallel, const MoeRows* moe, int head_split) {
  using G = RecomputePolicy::Granularity;
  const double elem = static_cast<double>(dtype_size(dtype));
  const double C = c.hidden_size, F = c.ffn() / static_cast<double>(tp), HD = c.head_dim();
  const double NH = c.num_attention_heads / static_cast<double>(tp);
  const int kv = units_per_rank(c.kv_heads(), tp);  // a group replicated below one per rank
  const double KV = kv;
  // The residual stream's rows on this rank.
  const double rows = sequence_parallel ? static_cast<double>(N) / tp : static_cast<double>(N);
  if (granularity == G::kFull) return elem * rows * C;  // the layer's input only
  const double up = c.swiglu ? 2 * F : F;  // the up projection's output (gate and value)
  // Per token of the MLP's place: the up projection's and the activation's outputs; an MoE
  // block's rows instead (their inputs, the experts' up projections and activations, outputs).
  double mlp = N * (up + F);
  if (moe != nullptr) {
    const MlpColumns e = mlp_columns(c, c.moe_ffn(), moe->expert_tp);
    const MlpColumns s = mlp_columns(c, c.moe.shared_expert_size, tp);
    mlp = moe->local * (C + e.up + e.act) + moe->permuted * C +
          (c.moe.shared_expert_size > 0 ? N * (s.up + s.act) : 0.0);
  }
  // Per norm: its fp32 statistics per row (LayerNorm mean and rstd, RMSNorm rstd).
  const double stats = c.normalization == Normalization::kLayerNorm ? 2 : 1;
  // q, k, v per token; in a head split of A ranks each holds NH / A query heads and KV / A
  // groups (one, replicated, when A does not divide KV) of A times the tokens.
  double qkv = (NH + 2 * KV) * HD, core_outputs = NH * HD;
  if (head_split > 1) {
    qkv = head_split * (NH / head_split + 2 * units_per_rank(kv, head_split)) * HD;
    core_outputs = 2 * NH * HD;  // the head split's and, after the exchange back, the sequence's
  }
  // The column-parallel layers keep their inputs as the residual stream holds them (gathered
  // again in backward, model/parallel_linear.h); an MoE block keeps its input gathered.
  const double mlp_input_rows = moe != nullptr ? static_cast<double>(N) : rows;
  double bytes = elem * rows * (C /*input*/ + C /*residual*/ + C /*norm1 output*/) +
                 elem * N * (qkv /*q, k, v*/ + core_outputs /*attention output*/) +
                 elem * mlp_input_rows * C /*norm2 output*/ + elem * mlp +
                 4.0 * (2 * stats * rows /*two norms*/ + N * NH /*attention log-sum-exp*/);
  // Selective recomputation reruns the attention core: its output and log-sum-exp are not kept.
  if (granularity == G::kSelective) bytes -= elem * N * core_outputs + 4.0 * N * NH;
  return bytes;
}

double layer_backward_working_bytes(const ModelConfig& c, int64_t N, DType dtype, int tp,
                                    bool sequence_parallel, const MoeRows* moe, int head_split,
                                    bool cp_blocks) {
  const double elem = static_cast<double>(dtype_size(dtype));
  const double C = c.hidden_size, F = c.ffn() / static_cast<double>(tp);
  const double up = c.swiglu ? 2 * F : F;
  const double rows = sequence_parallel ? static_cast<double>(N) / tp : static_cast<double>(N);
  // The attention's phase, after the MLP's (transformer_layer.cc): the incoming gradient and its
  // dropout copy, the MLP's input gradient (reduced: residual rows under SP), the residual's
  // gradient and its dropout copy, then the output projection's input gradient, q, k, v's and
  // the QKV projection's input gradient before its reduction (beside its input gathered again
  // under SP).
  const double HD = c.head_dim(), NH = c.num_attention_heads / static_cast<double>(tp);
  const int kv = units_per_rank(c.kv_heads(), tp);
  const double KV = kv;
  const double dropout_copies = c.hidden_dropout > 0 ? 2 * rows * C : 0.0;
  // The core's own: with the key/value blocks of p2p and all_gather, the fp32 row sums and
  // query gradient beside the packed q, k, v gradient (instead of the projection's input
  // gradient, which comes after they are freed); in a head split of A ranks, the output
  // gradient there and q, k, v's gradient there beside its exchange back (or the input gradient).
  // The QKV projection's backward: its input gradient before the reduction and, under SP, its
  // input gathered again beside it (freed before the reduce-scatter's slice is allocated).
  const double projection = N * C + (sequence_parallel ? N * C : 0.0);
  double core = projection;
  if (cp_blocks) core = std::max(core, (4.0 * N * NH + 4.0 * N * NH * HD) / elem);
  if (head_split > 1) {
    const double heads = NH / head_split + 2 * units_per_rank(kv, head_split);
    core = N * NH * HD + std::max(projection, head_split * heads * HD * N);
  }
  const double attention = elem * (rows * C + (sequence_parallel ? rows : N) * C + rows * C +
                                   dropout_copies + N * NH * HD + N * (NH + 2 * KV) * HD + core);
  if (moe != nullptr) {
    const double half = dtype != DType::kF32 ? 4.0 * (N * C + c.moe.num_experts * C) : 0.0;
    const double base =
        elem * (rows * C /*incoming gradient*/ + (c.hidden_dropout > 0 ? rows * C : 0.0) +
                (sequence_parallel ? N * C : 0.0) /*gathered*/ + N * C /*input gradient*/ +
                moe->permuted * C /*the rows' gradient*/) +
        half;
    const MlpColumns e = mlp_columns(c, c.moe_ffn(), moe->expert_tp);
    const MlpColumns s = mlp_columns(c, c.moe.shared_expert_size, tp);
    const double exchanged = moe->exchanged ? moe->local * C : 0.0;
    const double experts = exchanged + moe->local * C /*their input gradients*/ +
                           moe->per_expert * (e.act + e.up + C) /*one expert's backward*/;
    // The rows going back: the experts' gradients, reordered by source (all-to-all), and the
    // received ones.
    // (the all-gather dispatcher gathers into communication buffers instead).
    const double sent = c.moe.dispatcher == moe::DispatcherType::kAllGather ? 2 : 3;
    const double combine = moe->exchanged ? sent * moe->local * C + moe->permuted * C : 0.0;
    const double shared =
        moe->permuted * C +
        (c.moe.shared_expert_size > 0 ? N * (s.act + s.up + C) /*its backward*/ : 0.0);
    return std::max(attention, base + elem * std::max({experts, combine, shared}));
  }
  const double mlp =
      elem * (rows * C /*incoming gradient*/ + N * F /*d activation*/ + N * up /*d up*/ +
              N * C /*d input, before the reduction*/ +
              (sequence_parallel ? N * C : 0.0) /*the input gathered again, beside it*/ +
              (c.hidden_dropout > 0 ? rows * C : 0.0) /*the dropout's gradient, a copy*/);
  return std::max(mlp, attention);
}

}  // namespace tessera::model
