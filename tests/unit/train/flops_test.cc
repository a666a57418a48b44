// Model FLOPs against hand-worked counts: a dense LLaMA-style model and its MoE twin, whose MoE
// layers count the active FLOPs only (router, k experts).
#include "tessera/train/flops.h"

#include <gtest/gtest.h>

namespace tessera::train {
namespace {

TEST(ModelFlops, DenseAndMoeByHand) {
  // llama-tiny: s 64, h 64, 4 heads in 2 groups of head dim 16 (K/V width 32), SwiGLU 176,
  // 2 layers, padded vocabulary 384. Multiply-adds per token and layer: QKV 64 * (64 + 64) = 8192,
  // output projection 4096, causal attention s h = 4096, MLP 3 * 64 * 176 = 33792.
  model::ModelConfig dense = model::preset("llama-tiny");
  const double head = 384.0 * 64;
  EXPECT_DOUBLE_EQ(model_flops(dense, 384, 1),
                   6.0 * 64 * (2 * (8192 + 4096 + 4096 + 33792) + head));
  // mixtral-tiny: the MLP becomes a router of 8 experts (64 * 8) and 2 active experts of the
  // same MLP (2 * 33792).
  model::ModelConfig moe = model::preset("mixtral-tiny");
  EXPECT_DOUBLE_EQ(model_flops(moe, 384, 3),
                   3 * 6.0 * 64 * (2 * (8192 + 4096 + 4096 + 512 + 2 * 33792) + head));
  // Every other layer MoE, with a shared expert of 32.
  moe.moe.layer_freq = "[0,1]";
  moe.moe.shared_expert_size = 32;
  EXPECT_DOUBLE_EQ(model_flops(moe, 384, 1),
                   6.0 * 64 *
                       ((8192 + 4096 + 4096 + 33792) +
                        (8192 + 4096 + 4096 + 512 + 2 * 33792 + 3 * 64 * 32) + head));
}

}  // namespace
}  // namespace tessera::train
