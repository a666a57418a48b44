#include "tessera/model/scratch_memory.h"

#include <cmath>

#include "tessera/kernels/gemm.h"
#include "tessera/kernels/linear.h"
#include "tessera/kernels/norms.h"
#include "tessera/model/shard.h"

namespace tessera::model {
namespace {

// A linear layer's forward and backward (Linear: the input gradient is always computed).
void plan_linear(kernels::ScratchPlan& plan, DType dtype, int64_t N, int64_t C, int64_t OC,
                 bool bias, int threads) {
  kernels::plan_linear_forward(plan, dtype, N, C, OC, bias, threads);
  kernels::plan_linear_backward(plan, dtype, N, C, OC, true, threads);
}

// An MLP (mlp.cc) of `ffn` features split over `tp` ranks, on N rows: the column-parallel up
// projection (gate and value fused for SwiGLU; biases with --add-bias-linear) and the
// row-parallel down projection, whose bias is added after its reduction, outside the product.
void plan_mlp(kernels::ScratchPlan& plan, const ModelConfig& c, int64_t N, int64_t ffn, int tp,
              DType dtype, int threads) {
  const int64_t F = ffn / tp, up = c.swiglu ? 2 * F : F;
  plan_linear(plan, dtype, N, c.hidden_size, up, c.add_bias_linear, threads);
  plan_linear(plan, dtype, N, F, c.hidden_size, false, threads);
}

// A norm's backward over `rows` rows (LayerNorm with its bias' gradient, RMSNorm without).
void plan_norm(kernels::ScratchPlan& plan, const ModelConfig& c, int64_t rows) {
  kernels::plan_norm_backward(plan, rows, c.hidden_size,
                              c.normalization == Normalization::kLayerNorm);
}

}  // namespace

void plan_layer_scratch(kernels::ScratchPlan& plan, const ModelConfig& c, int64_t N, DType dtype,
                        int tp, bool sequence_parallel, int threads, const MoeRows* moe) {
  const int64_t C = c.hidden_size, HD = c.head_dim();
  // The two norms run on this rank's rows of the residual stream (their backward's temporary is
  // the same, planned once); the projections on the whole micro-batch's (gathered under
  // sequence parallelism).
  plan_norm(plan, c, sequence_parallel ? N / tp : N);
  // Attention: the fused q, k, v projection (key/value groups replicated when fewer than the
  // ranks) and the output projection (attention.cc).
  const int64_t q = int64_t{c.num_attention_heads} / tp * HD;
  const int64_t kv = int64_t{units_per_rank(c.kv_heads(), tp)} * HD;
  plan_linear(plan, dtype, N, C, q + 2 * kv, c.qkv_bias(), threads);
  plan_linear(plan, dtype, N, q, C, false, threads);
  if (moe == nullptr) return plan_mlp(plan, c, N, c.ffn(), tp, dtype, threads);
  // MoE (moe_layer.cc): the router's logits in fp32, x (N, C) by its weight (E, C), and their
  // two gradient products (accumulating, beta 1), then one MLP per local expert on its rows.
  const int64_t E = c.moe.num_experts;
  using kernels::GemmShape;
  if (!c.moe.router_fp64)  // an fp64 router computes its logits in plain loops
    kernels::plan_gemm(plan, GemmShape{false, true, N, E, C, C, C, E, 1.0f, 0.0f, DType::kF32,
                                       DType::kF32, DType::kF32, threads});
  kernels::plan_gemm(plan, GemmShape{true, false, E, C, N, E, C, C, 1.0f, 1.0f, DType::kF32,
                                     DType::kF32, DType::kF32, threads});
  kernels::plan_gemm(plan, GemmShape{false, false, N, C, E, E, C, C, 1.0f, 1.0f, DType::kF32,
                                     DType::kF32, DType::kF32, threads});
  const int64_t rows = std::llround(moe->per_expert);
  if (rows > 0) {
    const kernels::VaryingTokenCounts varying;  // the products' pieces, as the experts run them
    plan_mlp(plan, c, rows, c.moe_ffn(), moe->expert_tp, dtype, threads);
  }
  // The shared expert: tensor-parallel without the sequence split, on the micro-batch's rows.
  if (c.moe.shared_expert_size > 0)
    plan_mlp(plan, c, N, c.moe.shared_expert_size, tp, dtype, threads);
}

void plan_head_scratch(kernels::ScratchPlan& plan, const ModelConfig& c, int64_t N, DType dtype,
                       int tp, bool sequence_parallel, int threads) {
  plan_norm(plan, c, sequence_parallel ? N / tp : N);
  plan_linear(plan, dtype, N, c.hidden_size, c.padded_vocab_size(tp) / tp, false, threads);
}

}  // namespace tessera::model
