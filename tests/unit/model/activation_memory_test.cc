// The MoE rows and bytes of model/activation_memory.h against hand-worked values (the dense
// layer's count is held against the memory accountant in recompute_test.cc, the MoE layer's in
// tests/cli/memory_report.sh).
#include "tessera/model/activation_memory.h"

#include <gtest/gtest.h>

namespace tessera::model {
namespace {

// 64 tokens, 8 experts, top 2, C 128, experts of 384 SwiGLU columns (gate and value: 768).
ModelConfig moe_config() {
  ModelConfig c;
  c.hidden_size = 128;
  c.num_attention_heads = 4;
  c.seq_length = 64;
  c.swiglu = true;
  c.ffn_hidden_size = 512;
  c.moe.num_experts = 8;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 384;
  c.hidden_dropout = 0.1f;
  return c;
}

TEST(MoeRows, BalancedRowsFollowCapacityPaddingExpertParallelismAndFolding) {
  ModelConfig c = moe_config();
  // Dropless: 64 x 2 choices; EP 2: 4 local experts of 32 rows each.
  MoeRows r = balanced_moe_rows(c, 64, 2, 1, 1);
  EXPECT_EQ(r.permuted, 128);
  EXPECT_EQ(r.local, 128);
  EXPECT_EQ(r.per_expert, 32);
  EXPECT_TRUE(r.exchanged);
  // Capacity ceil(64 * 2 / 8 * 0.5) = 8 rows an expert: 64 of the 128 choices kept.
  c.moe.capacity_factor = 0.5f;
  EXPECT_EQ(balanced_moe_rows(c, 64, 1, 1, 1).permuted, 64);
  // Padded to capacity 32 (factor 2): 256 rows, 128 of them padding; folded over TP 2, TP rank 0
  // computes half the real rows and all the padding.
  c.moe.capacity_factor = 2.0f;
  c.moe.pad_to_capacity = true;
  EXPECT_EQ(balanced_moe_rows(c, 64, 1, 1, 1).permuted, 256);
  r = balanced_moe_rows(c, 64, 1, 1, 2);
  EXPECT_EQ(r.permuted, 64 + 128);
  EXPECT_EQ(r.per_expert, 192.0 / 8);
  EXPECT_FALSE(r.exchanged);
}

TEST(MoeRows, AnMoeLayerKeepsItsRowsInPlaceOfTheDenseMlp) {
  const ModelConfig c = moe_config();
  using G = RecomputePolicy::Granularity;
  const MoeRows r = balanced_moe_rows(c, 64, 1, 1, 1);  // 128 rows
  const double dense = layer_activation_bytes(c, 64, DType::kBF16, G::kNone);
  const double moe = layer_activation_bytes(c, 64, DType::kBF16, G::kNone, 1, false, &r);
  // Dense MLP: 64 x (1024 + 512) elements. MoE: 128 rows x (128 inputs + 768 + 384) and 128
  // output rows x 128. Two bytes each.
  EXPECT_EQ(moe - dense, 2.0 * (128 * (128 + 768 + 384) + 128 * 128 - 64 * (1024 + 512)));
  // Full recomputation keeps the layer's input only, MoE or not.
  EXPECT_EQ(layer_activation_bytes(c, 64, DType::kBF16, G::kFull, 1, false, &r),
            layer_activation_bytes(c, 64, DType::kBF16, G::kFull));
  // Backward, single rank, no shared expert, bf16: incoming gradient, its copy through the
  // dropout, input gradient and rows' gradient (64 + 64 + 64 + 128 rows of 128), fp32 copies of the
  // input and router (4 (64 + 8) 128), then the experts' phase: their input gradients (128 rows)
  // and one expert's backward (16 rows x (384 + 768 + 128)).
  const double working = layer_backward_working_bytes(c, 64, DType::kBF16, 1, false, &r);
  EXPECT_EQ(working, 2.0 * (64 + 64 + 64 + 128) * 128 + 4.0 * (64 + 8) * 128 +
                         2.0 * (128 * 128 + 16 * (384 + 768 + 128)));
}

// Korthikanti et al. 2022 (Table 2) count 34 s b h / t bytes a layer under TP t with sequence
// parallelism and selective recomputation (16-bit, GPT, ffn 4h). Here, with s b = 64 tokens,
// h = 128, t = 2 (32 residual rows a rank), bf16: the input, the residual and the first norm's
// output (the QKV projection's input, kept as the rank's rows), q, k and v (3 h of all 64
// tokens, t = 2 heads' worth each: 3 h / t a token), the second norm's output (the up
// projection's input, the rank's rows), the up projection's and GELU's outputs (4 h / t each of
// 64 tokens): 2 (3 + 3 + 1 + 4 + 4) sbh/t = 30 sbh/t, and the two LayerNorms' fp32 mean and rstd
// per row. The paper's other 4 sbh/t: the output projection's input (2; rebuilt by the
// recomputed core here) and the two hidden-dropout masks of a byte each (regenerated from the
// RNG here, never stored).
TEST(LayerActivationBytes, SequenceParallelSelectiveIsKorthikantisCountLessWhatIsRebuilt) {
  ModelConfig c;
  c.hidden_size = 128;
  c.num_attention_heads = 4;
  c.ffn_hidden_size = 512;
  c.seq_length = 64;
  c.normalization = Normalization::kLayerNorm;
  c.swiglu = false;
  c.hidden_dropout = 0.1f;
  using G = RecomputePolicy::Granularity;
  const double sbh_t = 64.0 * 128 / 2;
  EXPECT_EQ(layer_activation_bytes(c, 64, DType::kBF16, G::kSelective, 2, true),
            30 * sbh_t + 4.0 * 2 * 2 * 32);
  // Without sequence parallelism the residual stream's tensors hold all 64 tokens: 8 sbh + 22
  // sbh/t, the paper's TP-only row with selective recomputation, sbh (10 + 24/t), less the two
  // masks (2 sbh) and the output projection's input (2 sbh/t).
  EXPECT_EQ(
      layer_activation_bytes(c, 64, DType::kBF16, G::kSelective, 2, false),
      2.0 * 64 * 128 * (1 + 1 + 1 + 1) + 2.0 * 64 * (3 * 64 + 4 * 64 + 4 * 64) + 4.0 * 2 * 2 * 64);
}

}  // namespace
}  // namespace tessera::model
