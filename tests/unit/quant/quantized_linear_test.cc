// Weight-only quantization in the model (quant/quantized_linear.h, Linear::quantize,
// GPTModel::quantize_weights): a quantized linear forward equals the decoded matrix's product in
// double, on the decode path (<= 8 rows) and the prefill path (decoded tiles and a GEMM), for
// fp32 and bf16 activations, with a bias; a quantized model's logits equal those of the same
// model whose linear weights were replaced by their decoded values (so every layer's weights go
// through the quantized path, and nothing else changes), in dense and MoE models (experts and
// the shared expert quantized, the router not).
#include "tessera/quant/quantized_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <random>

#include "tessera/core/error.h"
#include "tessera/core/threads.h"
#include "tessera/model/gpt_model.h"
#include "testing/llama_style.h"

namespace tessera::quant {
namespace {

std::vector<float> normal(int64_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// quantized_linear_forward of an OC x C weight in each format against the decoded matrix's
// product in double, for N input rows of each dtype.
void expect_forward_equals_decoded_product(int64_t OC, int64_t C,
                                           std::initializer_list<QuantFormat> formats,
                                           std::initializer_list<int64_t> rows) {
  const std::vector<float> w = normal(OC * C, 1, 0.05f), b = normal(OC, 2, 0.1f);
  Tensor bias = Tensor::empty({OC}, DType::kF32);
  std::copy(b.begin(), b.end(), bias.data<float>());
  for (QuantFormat f : formats) {
    const QuantizedMatrix q = quantize(w.data(), OC, C, f);
    const std::vector<float> dense = dequantize(q);
    for (int64_t N : rows) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        const std::vector<float> xs = normal(N * C, static_cast<unsigned>(N), 1.0f);
        Tensor x32 = Tensor::empty({N, C}, DType::kF32);
        std::copy(xs.begin(), xs.end(), x32.data<float>());
        const Tensor x = x32.to(dtype, MemoryCategory::kActivations);
        const Tensor y =
            quantized_linear_forward(x, q, bias).to(DType::kF32, MemoryCategory::kActivations);
        const Tensor xin = x.to(DType::kF32, MemoryCategory::kActivations);  // what the kernel saw
        double worst = 0;
        for (int64_t i = 0; i < N; ++i)
          for (int64_t o = 0; o < OC; ++o) {
            double ref = b[o], mag = std::fabs(b[o]);
            for (int64_t k = 0; k < C; ++k) {
              ref += double(xin.data<float>()[i * C + k]) * dense[o * C + k];
              mag += std::fabs(double(xin.data<float>()[i * C + k]) * dense[o * C + k]);
            }
            // fp32 accumulation (a few ulp of the magnitude), then one rounding to the dtype.
            const double tol = mag * 2e-6 + std::fabs(ref) * (dtype == DType::kBF16 ? 4e-3 : 0);
            worst = std::max(worst, std::fabs(y.data<float>()[i * OC + o] - ref) / (tol + 1e-30));
          }
        EXPECT_LE(worst, 1.0) << quant_format_name(f) << " " << OC << " x " << C << " N " << N
                              << " " << dtype_name(dtype);
      }
    }
  }
}

TEST(QuantizedLinear, ForwardEqualsTheDecodedMatrixProduct) {
  // One prefill tile (OC rows of 128 inputs fit in it); N <= 8 takes the decode kernel.
  expect_forward_equals_decoded_product(
      300, 128, {QuantFormat::kFp6, QuantFormat::kInt8, QuantFormat::kQ8_0, QuantFormat::kQ4},
      {1, 3, 8, 9, 70});
}

TEST(QuantizedLinear, PrefillOverSeveralTilesEqualsTheDecodedMatrixProduct) {
  // Rows of 8192 inputs: tiles of 128 rows (4 MiB of fp32), so 300 rows are three, the last of
  // 44: each tile's product lands at its own rows of the output.
  expect_forward_equals_decoded_product(300, 8192, {QuantFormat::kFp6, QuantFormat::kQ4}, {9, 33});
}

// The same model with every 2-D weight but the embedding and the MoE routers replaced by its
// decoded codes: what quantize_weights must be equivalent to.
// Weights whose names contain `keep` (when given) keep their values too.
void decode_weights_in_place(model::GPTModel& m, QuantFormat f, const std::string& keep = "") {
  const auto ends = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (model::Parameter& p : m.params().all()) {
    if (p.local_shape.size() != 2 ||
        (p.embedding_or_output && p.name.find("embed") != std::string::npos) ||
        ends(p.name, ".gate.weight") || (!keep.empty() && p.name.find(keep) != std::string::npos))
      continue;  // the embedding, the norms and the routers stay
    const QuantizedMatrix q =
        quantize(p.value.data<float>(), p.local_shape[0], p.local_shape[1], f, 32);
    const std::vector<float> back = dequantize(q);
    std::copy(back.begin(), back.end(), p.value.data<float>());
  }
}

model::ModelConfig small_llama() {
  model::ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 16;
  c.vocab_size = 96;
  c.init_method_std = 0.05f;
  c.attention_dropout = 0.0f;
  c.hidden_dropout = 0.0f;
  testing::make_llama_style(c, 2);  // untied output layer, SwiGLU, grouped-query attention
  c.ffn_hidden_size = 128;
  return c;
}

// Loss of a quantized model, of the model with decoded weights and of the plain one.
void expect_quantized_is_decoded(const model::ModelConfig& c, const std::string& what) {
  set_num_threads(1);
  for (QuantFormat f : {QuantFormat::kFp6, QuantFormat::kInt8, QuantFormat::kQ4}) {
    model::GPTModel quantized(c, DType::kF32, 5), decoded(c, DType::kF32, 5),
        plain(c, DType::kF32, 5);
    quantized.quantize_weights(f, 32, /*output_layer=*/true);
    decode_weights_in_place(decoded, f);
    std::vector<int32_t> tokens(12);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((7 * i + 3) % 96);
    std::vector<int32_t> targets(tokens.size(), 1);
    const model::Batch batch{tokens.data(), targets.data(), nullptr, 1, 12};
    const auto loss = [&](model::GPTModel& m) {
      return m.forward_loss(batch, m.context(1, 12, 0, 0, 0, false)).loss_sum;
    };
    const double lq = loss(quantized), ld = loss(decoded), lp = loss(plain);
    // Measured: at most 3.2e-8 of the loss apart (summation order); 2e-7 leaves room and still
    // sees the experts run unquantized (below).
    EXPECT_NEAR(lq, ld, 2e-7 * std::fabs(ld)) << what << " " << quant_format_name(f);
    EXPECT_GT(std::fabs(lq - lp), 1e-4 * std::fabs(lp))
        << what << " " << quant_format_name(f) << ": quantization changed nothing?";
    // The check above can see the experts (or the shared expert) run unquantized: decoding all
    // but them moves the loss by 5x its tolerance or more (measured 2.2e-6 to 3e-3 of it).
    std::vector<std::string> parts;
    if (c.moe.enabled()) parts.push_back(".experts.");
    if (c.moe.shared_expert_size > 0) parts.push_back(".shared_experts.");
    for (const std::string& part : parts) {
      model::GPTModel all_but(c, DType::kF32, 5);
      decode_weights_in_place(all_but, f, part);
      EXPECT_GT(std::fabs(lq - loss(all_but)), 1e-6 * std::fabs(ld))
          << what << " " << quant_format_name(f) << ": " << part << " ran unquantized?";
    }
  }
}

TEST(QuantizedLinear, AQuantizedModelIsTheModelWithDecodedWeights) {
  expect_quantized_is_decoded(small_llama(), "dense");
}

// MoE layers: every expert and the shared expert run on codes, the router on its own weights
// (an expert left unquantized would differ from its decoded twin by the quantization error).
TEST(QuantizedLinear, AQuantizedMoeModelIsTheModelWithDecodedExperts) {
  model::ModelConfig c = small_llama();
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 64;
  expect_quantized_is_decoded(c, "mixtral-style");
  c.moe.shared_expert_size = 96;
  expect_quantized_is_decoded(c, "with a shared expert");
}

}  // namespace
}  // namespace tessera::quant
