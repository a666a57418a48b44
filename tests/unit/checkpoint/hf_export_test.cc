// Hugging Face export: names, Transformers' layouts (GPT-2 Conv1D transposed, vocabulary
// padding stripped, tied head not written) and values equal to the fp32 master weights.
#include "tessera/checkpoint/hf_export.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/model/gpt_model.h"
#include "testing/temp_dir.h"

namespace tessera::checkpoint {
namespace {

model::ModelConfig tiny(bool llama) {
  model::ModelConfig c = model::preset(llama ? "llama-tiny" : "gpt2-tiny");
  c.vocab_size = 50;  // padded to 128 inside Tessera
  return c;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(HfExport, Gpt2LayoutNamesAndValues) {
  testing::TempDir dir;
  const model::ModelConfig cfg = tiny(false);
  model::GPTModel m(cfg, DType::kF32, 5);
  const std::string path = dir.file("model.safetensors");
  export_hf(cfg, m.params(), [](const model::Parameter& p) { return p.value; }, path);
  SafetensorsFile f(path);
  // Padded vocabulary rows are stripped; no lm_head for a tied model.
  EXPECT_EQ(f.info("transformer.wte.weight").shape, (std::vector<int64_t>{50, 64}));
  EXPECT_FALSE(f.contains("lm_head.weight"));
  EXPECT_EQ(f.names().size(), m.params().all().size());
  // Conv1D: Transformers stores c_attn as [in, out] = [64, 192]; Tessera holds (out, in).
  const auto& info = f.info("transformer.h.1.attn.c_attn.weight");
  ASSERT_EQ(info.shape, (std::vector<int64_t>{64, 192}));
  const float* exported = static_cast<const float*>(f.data("transformer.h.1.attn.c_attn.weight"));
  const Tensor& ours = m.params().get("transformer.h.1.attn.c_attn.weight").value;
  for (int64_t out = 0; out < 192; out += 7)
    for (int64_t in = 0; in < 64; in += 5)
      ASSERT_EQ(exported[in * 192 + out], ours.data<float>()[out * 64 + in]) << out << "," << in;
  // Non-Conv1D tensors are copied as they are.
  const float* ln = static_cast<const float*>(f.data("transformer.ln_f.weight"));
  EXPECT_EQ(ln[3], 1.0f);
  const auto config = read_json(dir.file("config.json"));
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["n_embd"], 64);
  EXPECT_EQ(config["n_layer"], 2);
  EXPECT_EQ(config["vocab_size"], 50);
  EXPECT_EQ(config["activation_function"], "gelu_new");
  EXPECT_EQ(config["tie_word_embeddings"], true);
}

TEST(HfExport, LlamaLayoutComesFromTheFp32Master) {
  testing::TempDir dir;
  const model::ModelConfig cfg = tiny(true);
  model::GPTModel m(cfg, DType::kBF16, 5);
  // The exporter writes whatever the caller calls the master: here exact fp32 initial values,
  // which bf16 compute weights could not reproduce.
  const std::string path = dir.file("model.safetensors");
  export_hf(cfg, m.params(), [&](const model::Parameter& p) {
    Tensor t = Tensor::empty(p.global_shape, DType::kF32);
    m.params().initial_values(p, t.data<float>());
    return t;
  }, path);
  SafetensorsFile f(path);
  EXPECT_EQ(f.info("model.layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(f.info("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(f.info("lm_head.weight").shape, (std::vector<int64_t>{50, 64}));
  const model::Parameter& up = m.params().get("model.layers.1.mlp.up_proj.weight");
  const float* v = static_cast<const float*>(f.data("model.layers.1.mlp.up_proj.weight"));
  EXPECT_EQ(v[3 * 64 + 9], model::ParameterSet::init_value(up, 5, 3, 9));
  const auto config = read_json(dir.file("config.json"));
  EXPECT_EQ(config["model_type"], "llama");
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["intermediate_size"], 176);
  EXPECT_EQ(config["tie_word_embeddings"], false);
  EXPECT_EQ(config["attention_bias"], false);
}

}  // namespace
}  // namespace tessera::checkpoint
