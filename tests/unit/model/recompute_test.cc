// Activation recomputation does what it says, beyond giving the same numbers (the invariance
// harness checks those): the bytes a micro-batch keeps between forward and backward, measured
// by the memory accountant, equal the analytic count of model/activation_memory.h for each
// policy, and recomputed layers run their forward a second time in backward while the others
// do not (GPTModel::layer_forward_counts).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/core/memory.h"
#include "tessera/model/activation_memory.h"
#include "tessera/model/chunk_runner.h"
#include "tessera/model/gpt_model.h"
#include "testing/llama_style.h"

namespace tessera::model {
namespace {

using G = RecomputePolicy::Granularity;
using M = RecomputePolicy::Method;

// A 4-layer LLaMA-style model (GQA, RMSNorm, SwiGLU), no dropout.
ModelConfig four_layer_llama() {
  ModelConfig c;
  c.num_layers = 4;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  testing::make_llama_style(c, 2);
  c.ffn_hidden_size = 48;
  c.seq_length = 16;
  c.max_position_embeddings = 16;
  c.vocab_size = 37;
  c.attention_dropout = c.hidden_dropout = 0.0f;
  return c;
}

int64_t activations_now() {
  return MemoryAccountant::instance().snapshot().current[static_cast<int>(MemoryCategory::kActivations)];
}

struct Measured {
  int64_t held = 0;                     // kept between forward and backward, final output excluded
  std::vector<int64_t> forward_counts;  // per layer, over one forward + backward
  std::vector<float> grads;             // every gradient after it
};

Measured run(DType dtype, const RecomputePolicy& policy) {
  const ModelConfig c = four_layer_llama();
  GPTModel model(c, dtype, 5);
  ChunkRunner runner(model);
  runner.set_recompute(policy);
  const int64_t B = 2, T = c.seq_length;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    tokens[i] = static_cast<int32_t>((11 * i + 2) % c.vocab_size);
    targets[i] = static_cast<int32_t>((3 * i + 5) % c.vocab_size);
  }
  const Batch batch{tokens.data(), targets.data(), nullptr, B, T};
  const StepContext ctx = model.context(B, T, 0, 9, 1, true);
  model.params().zero_grads();
  Measured m;
  const int64_t before = activations_now();
  {
    ChunkActivations act;
    runner.forward_chunk(0, Tensor(), batch, ctx, &act);
    m.held = activations_now() - before - act.output.nbytes();
    LossSum loss;
    runner.backward_chunk(0, Tensor(), batch, ctx, 1.0f, act, &loss);
  }
  m.forward_counts = model.layer_forward_counts();
  const Tensor& g = model.params().flat_grads();
  m.grads.assign(g.data<float>(), g.data<float>() + g.numel());
  return m;
}

TEST(Recompute, KeptBytesMatchTheAnalyticCountAndRecomputedLayersRunTwice) {
  const ModelConfig c = four_layer_llama();
  const int64_t N = 2 * c.seq_length;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const double layer_none = layer_activation_bytes(c, N, dtype, G::kNone);
    const double layer_full = layer_activation_bytes(c, N, dtype, G::kFull);
    const double layer_selective = layer_activation_bytes(c, N, dtype, G::kSelective);
    const Measured none = run(dtype, {});
    const Measured full = run(dtype, {G::kFull, M::kUniform, 1});
    const Measured block = run(dtype, {G::kFull, M::kBlock, 2});
    const Measured grouped = run(dtype, {G::kFull, M::kUniform, 2});
    const Measured selective = run(dtype, {G::kSelective, M::kUniform, 1});
    const char* name = dtype_name(dtype);

    EXPECT_EQ(none.held, 4 * layer_none) << name;
    // Full, uniform groups of 1: every layer keeps its input only.
    EXPECT_EQ(full.held, 4 * layer_full) << name;
    // Block 2: the first two layers keep their inputs, the last two everything.
    EXPECT_EQ(block.held, 2 * layer_full + 2 * layer_none) << name;
    // Uniform groups of 2: each group keeps its first layer's input (two of four inputs).
    EXPECT_EQ(grouped.held, 2 * layer_full) << name;
    // Selective: every layer keeps everything but the attention core's output and statistics.
    EXPECT_EQ(selective.held, 4 * layer_selective) << name;
    EXPECT_LT(full.held, selective.held);
    EXPECT_LT(selective.held, none.held);

    EXPECT_EQ(none.forward_counts, (std::vector<int64_t>{1, 1, 1, 1})) << name;
    EXPECT_EQ(full.forward_counts, (std::vector<int64_t>{2, 2, 2, 2})) << name;
    EXPECT_EQ(block.forward_counts, (std::vector<int64_t>{2, 2, 1, 1})) << name;
    EXPECT_EQ(grouped.forward_counts, (std::vector<int64_t>{2, 2, 2, 2})) << name;
    // Selective reruns the attention core inside the layer's backward, not the layer.
    EXPECT_EQ(selective.forward_counts, (std::vector<int64_t>{1, 1, 1, 1})) << name;

    // And the gradients are the same bits: recomputation reruns the same operations.
    EXPECT_EQ(full.grads, none.grads) << name;
    EXPECT_EQ(block.grads, none.grads) << name;
    EXPECT_EQ(grouped.grads, none.grads) << name;
    EXPECT_EQ(selective.grads, none.grads) << name;
  }
}

}  // namespace
}  // namespace tessera::model
