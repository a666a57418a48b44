// Whole-model gradient checks: the analytic gradient of the summed token loss with respect to
// every parameter tensor against central finite differences, for a 2-layer GPT-2-style config
// and a 2-layer LLaMA-style config (GQA, RoPE, SwiGLU, RMSNorm, untied output layer).
#include "tessera/model/gpt_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/numeric.h"

namespace tessera::model {
namespace {

struct TinyBatch {
  std::vector<int32_t> tokens, targets;
  std::vector<float> mask;
  Batch batch() const {
    return {tokens.data(), targets.data(), mask.empty() ? nullptr : mask.data(), 2,
            static_cast<int64_t>(tokens.size() / 2)};
  }
};

TinyBatch make_batch(int64_t T, int64_t vocab, bool with_mask) {
  TinyBatch b;
  for (int64_t i = 0; i < 2 * T; ++i) {
    b.tokens.push_back(static_cast<int32_t>((7 * i + 3) % vocab));
    b.targets.push_back(static_cast<int32_t>((5 * i + 1) % vocab));
    if (with_mask) b.mask.push_back(i % 5 == 2 ? 0.0f : 1.0f);
  }
  return b;
}

ModelConfig tiny_gpt() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.seq_length = 8;
  c.max_position_embeddings = 8;
  c.vocab_size = 29;
  c.make_vocab_size_divisible_by = 16;  // 29 -> 32: two padded rows must stay inert
  c.init_method_std = 0.3f;             // large weights make gradients large against fp32 noise
  c.attention_dropout = 0.0f;
  c.hidden_dropout = 0.0f;
  return c;
}

ModelConfig tiny_llama() {
  ModelConfig c = tiny_gpt();
  c.num_attention_heads = 4;
  c.group_query_attention = true;
  c.num_query_groups = 2;
  c.normalization = Normalization::kRMSNorm;
  c.position_embedding = PositionEmbedding::kRope;
  c.swiglu = true;
  c.ffn_hidden_size = 24;
  c.untie_embeddings_and_output_weights = true;
  c.add_bias_linear = false;
  return c;
}

// Checks up to `per_tensor` elements of every parameter tensor (spread over the tensor).
void check_model_gradients(const ModelConfig& cfg, bool with_mask, int per_tensor) {
  GPTModel model(cfg, DType::kF32, 42);
  TinyBatch tb = make_batch(cfg.seq_length, cfg.vocab_size, with_mask);
  const StepContext ctx = StepContext::make(2, cfg.seq_length, 0, 42, 1, true);
  model.params().zero_grads();
  model.forward_backward(tb.batch(), ctx, 1.0f);

  auto loss = [&]() { return model.forward_loss(tb.batch(), ctx).loss_sum; };
  int checked_tensors = 0;
  for (Parameter& p : model.params().all()) {
    float* w = p.value.data<float>();
    const float* g = p.grad.data<float>();
    const int64_t n = p.numel();
    const int64_t rows = p.global_shape[0];
    double max_err = 0.0, max_grad = 0.0;
    for (int k = 0; k < per_tensor; ++k) {
      int64_t i = (k * 7919 + 13) % n;
      // Padded vocabulary rows carry no gradient: check real rows only.
      if (p.shard.vocab_rows > 0) i %= p.shard.vocab_rows * (n / rows);
      const float saved = w[i];
      const double h = 1e-2;
      w[i] = saved + static_cast<float>(h);
      const double plus = loss();
      w[i] = saved - static_cast<float>(h);
      const double minus = loss();
      w[i] = saved;
      const double fd = (plus - minus) / (2 * h);
      max_err = std::max(max_err, std::fabs(fd - g[i]));
      max_grad = std::max(max_grad, std::fabs(double(g[i])));
    }
    // Central differences have O(h^2) truncation error and fp32 loss noise ~1e-6 / (2h); 2% of
    // the largest checked gradient (plus a small absolute floor) bounds both comfortably.
    EXPECT_LE(max_err, 2e-2 * max_grad + 2e-3) << p.name << " max_grad=" << max_grad;
    ++checked_tensors;
    if (p.shard.vocab_rows > 0) {  // padded rows: exactly zero gradient
      for (int64_t i = p.shard.vocab_rows * (n / rows); i < n; ++i) ASSERT_EQ(g[i], 0.0f) << p.name;
    }
  }
  EXPECT_EQ(checked_tensors, static_cast<int>(model.params().all().size()));
}

TEST(GptModel, Gpt2StyleGradientsMatchFiniteDifferences) {
  check_model_gradients(tiny_gpt(), /*with_mask=*/true, 6);
}

TEST(GptModel, LlamaStyleGradientsMatchFiniteDifferences) {
  check_model_gradients(tiny_llama(), /*with_mask=*/false, 6);
}

TEST(GptModel, DropoutGradientsMatchFiniteDifferences) {
  // Dropout masks are a pure function of (seed, iteration, coordinates), so the loss is a
  // deterministic function of the weights and finite differences apply.
  ModelConfig c = tiny_gpt();
  c.hidden_dropout = 0.2f;
  c.attention_dropout = 0.2f;
  check_model_gradients(c, /*with_mask=*/false, 4);
}

TEST(GptModel, HuggingFaceNamesAndShapes) {
  GPTModel gpt(tiny_gpt(), DType::kF32, 1);
  EXPECT_EQ(gpt.params().get("transformer.h.1.attn.c_attn.weight").global_shape, (Shape{48, 16}));
  EXPECT_EQ(gpt.params().get("transformer.wte.weight").global_shape, (Shape{32, 16}));
  EXPECT_TRUE(gpt.params().contains("transformer.wpe.weight"));
  EXPECT_FALSE(gpt.params().contains("lm_head.weight"));  // tied
  GPTModel llama(tiny_llama(), DType::kF32, 1);
  EXPECT_EQ(llama.params().get("model.layers.0.self_attn.k_proj.weight").global_shape,
            (Shape{8, 16}));
  EXPECT_EQ(llama.params().get("model.layers.1.mlp.gate_proj.weight").global_shape,
            (Shape{24, 16}));
  EXPECT_TRUE(llama.params().contains("lm_head.weight"));
  EXPECT_EQ(static_cast<int64_t>(llama.params().numel()),
            tiny_llama().num_parameters() + 2 * (32 - 29) * 16);  // + padded rows of two tables
}

TEST(GptModel, InitialisationDependsOnlyOnSeedNameAndCoordinates) {
  GPTModel a(tiny_llama(), DType::kF32, 7);
  ModelConfig deeper = tiny_llama();
  deeper.num_layers = 3;  // more parameters before lm_head: offsets differ, values must not
  GPTModel b(deeper, DType::kF32, 7);
  const Parameter& pa = a.params().get("model.layers.1.mlp.up_proj.weight");
  const Parameter& pb = b.params().get("model.layers.1.mlp.up_proj.weight");
  for (int64_t i = 0; i < pa.numel(); ++i)
    ASSERT_EQ(pa.value.data<float>()[i], pb.value.data<float>()[i]);
  const float v = a.params().get("lm_head.weight").value.data<float>()[5 * 16 + 3];
  EXPECT_EQ(v, ParameterSet::init_value(a.params().get("lm_head.weight"), 7, 5, 3));
  EXPECT_NE(v, ParameterSet::init_value(a.params().get("lm_head.weight"), 8, 5, 3));
}

TEST(GptModel, Bf16LossTracksFp32) {
  ModelConfig c = tiny_llama();
  c.init_method_std = 0.02f;
  GPTModel f32(c, DType::kF32, 3), b16(c, DType::kBF16, 3);
  TinyBatch tb = make_batch(c.seq_length, c.vocab_size, false);
  const StepContext ctx = StepContext::make(2, c.seq_length, 0, 3, 1, false);
  const double lf = f32.forward_loss(tb.batch(), ctx).loss_sum;
  const double lb = b16.forward_loss(tb.batch(), ctx).loss_sum;
  // bf16 weights and activations carry ~3 significant digits; the summed loss of 16 tokens
  // near log(29) each stays within 1%.
  EXPECT_NEAR(lb, lf, 1e-2 * std::fabs(lf));
}

TEST(GptModel, Fp16LossAndGradientsTrackFp32) {
  ModelConfig c = tiny_gpt();
  c.init_method_std = 0.02f;
  GPTModel f32(c, DType::kF32, 3), f16(c, DType::kF16, 3);
  TinyBatch tb = make_batch(c.seq_length, c.vocab_size, true);
  const StepContext ctx = StepContext::make(2, c.seq_length, 0, 3, 1, true);
  f32.params().zero_grads();
  f16.params().zero_grads();
  const double lf = f32.forward_backward(tb.batch(), ctx, 1.0f).loss_sum;
  const double lh = f16.forward_backward(tb.batch(), ctx, 1.0f).loss_sum;
  // fp16 keeps 11 significant bits: the summed loss agrees to ~1e-3 relative.
  EXPECT_NEAR(lh, lf, 2e-3 * std::fabs(lf));
  const Tensor& gf = f32.params().flat_grads();
  const Tensor& gh = f16.params().flat_grads();
  double dot = 0, nf = 0, nh = 0;
  for (int64_t i = 0; i < gf.numel(); ++i) {
    const double a = gf.data<float>()[i], b = gh.data<float>()[i];
    dot += a * b;
    nf += a * a;
    nh += b * b;
  }
  // Gradients pass through fp16 activations layer by layer; their direction stays the same.
  EXPECT_GT(dot / std::sqrt(nf * nh), 0.999);
}

}  // namespace
}  // namespace tessera::model
