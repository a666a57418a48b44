// Whole-model gradient checks: the analytic gradient of the summed token loss with respect to
// every parameter tensor against central finite differences, for a 2-layer GPT-2-style config
// and a 2-layer LLaMA-style config (GQA, RoPE, SwiGLU, RMSNorm, untied output layer).
#include "tessera/model/gpt_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "tessera/model/chunk_runner.h"
#include "testing/llama_style.h"
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
  testing::make_llama_style(c, 2);
  c.ffn_hidden_size = 24;
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

// A model built to be loaded (no seed) draws nothing: every value is zero, norms' ones included,
// until the loader writes it.
TEST(GptModel, WithoutSeedNothingIsInitialised) {
  GPTModel seeded(tiny_llama(), DType::kF32, 7);
  GPTModel unseeded(tiny_llama(), DType::kF32, std::nullopt);
  int64_t nonzero_seeded = 0;
  for (const Parameter& p : unseeded.params().all()) {
    const float* v = p.value.data<float>();
    for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(v[i], 0.0f) << p.name << "[" << i << "]";
    const float* s = seeded.params().get(p.name).value.data<float>();
    for (int64_t i = 0; i < p.numel(); ++i) nonzero_seeded += s[i] != 0.0f;
  }
  EXPECT_GT(nonzero_seeded, 0);  // the same declarations, initialised when seeded
}

// Logits (tokens, vocab) from final hidden states, in double: RMSNorm with the fp32 model's
// model.norm.weight, then its lm_head.weight. The same head for both models, so the difference
// of the logits is that of the two forwards.
std::vector<double> llama_logits(const GPTModel& fp32_model, const Tensor& hidden) {
  const ModelConfig& c = fp32_model.config();
  const int64_t N = hidden.dim(0), C = c.hidden_size, V = c.vocab_size;
  const float* norm_w = fp32_model.params().get("model.norm.weight").value.data<float>();
  const float* head_w = fp32_model.params().get("lm_head.weight").value.data<float>();
  std::vector<double> logits(N * V);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> x(C);
    double ss = 0;
    for (int64_t i = 0; i < C; ++i) {
      x[i] = hidden.dtype() == DType::kF32 ? hidden.data<float>()[n * C + i]
                                           : to_f32(hidden.data<bf16>()[n * C + i]);
      ss += x[i] * x[i];
    }
    const double inv = 1.0 / std::sqrt(ss / C + c.norm_epsilon);
    for (int64_t v = 0; v < V; ++v) {
      double dot = 0;
      for (int64_t i = 0; i < C; ++i) dot += x[i] * inv * norm_w[i] * head_w[v * C + i];
      logits[n * V + v] = dot;
    }
  }
  return logits;
}

TEST(GptModel, Bf16ForwardTracksFp32) {
  // init std 0.3 (tiny_gpt's): logits of order 1, so the loss depends on what the forward
  // computes; at 0.02 every logit is ~0 and any forward gives a loss of ln(vocab).
  const ModelConfig c = tiny_llama();
  GPTModel f32(c, DType::kF32, 3), b16(c, DType::kBF16, 3);
  TinyBatch tb = make_batch(c.seq_length, c.vocab_size, false);
  const StepContext ctx = StepContext::make(2, c.seq_length, 0, 3, 1, false);
  const double lf = f32.forward_loss(tb.batch(), ctx).loss_sum;
  const double lb = b16.forward_loss(tb.batch(), ctx).loss_sum;
  const double uniform = 2.0 * c.seq_length * std::log(static_cast<double>(c.vocab_size));
  ASSERT_GT(std::fabs(lf - uniform), 0.2 * uniform) << "the loss does not depend on the forward";

  const std::vector<double> logits_f32 =
      llama_logits(f32, ChunkRunner(f32).forward_chunk(0, Tensor(), tb.batch(), ctx, nullptr));
  const std::vector<double> logits_b16 =
      llama_logits(f32, ChunkRunner(b16).forward_chunk(0, Tensor(), tb.batch(), ctx, nullptr));
  double scale = 0, worst = 0;
  for (size_t i = 0; i < logits_f32.size(); ++i) {
    scale = std::max(scale, std::fabs(logits_f32[i]));
    worst = std::max(worst, std::fabs(logits_b16[i] - logits_f32[i]));
  }
  ASSERT_GT(scale, 1.0);
  // bf16 weights (rounded once) and activations (rounded after every op, 2^-9 relative each)
  // through 2 layers: a few percent of the logits' scale. A wrong bf16 forward is off by O(1).
  EXPECT_LT(worst / scale, 4e-2) << "worst " << worst << " of scale " << scale;
  // The loss (16 tokens) follows the logits: within 1% of the fp32 one.
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
