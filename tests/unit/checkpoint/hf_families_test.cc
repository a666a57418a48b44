// The Hugging Face families beyond GPT-2 and Llama 2: Llama 3.x (rope_scaling "llama3"), Qwen2 /
// Qwen2.5 (q/k/v biases only) and Mistral (sliding window). Their configs map onto ModelConfig
// with each class's defaults, export -> import -> export is byte-identical (config.json and
// weights), and what Tessera does not compute is refused with one line naming the file and key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/hf_testing.h"
#include "tessera/checkpoint/hf_export.h"
#include "tessera/checkpoint/hf_import.h"
#include "tessera/model/gpt_model.h"
#include "testing/temp_dir.h"

namespace tessera::checkpoint {
namespace {

using testing_hf::error_of;
using testing_hf::write_text;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

model::ModelConfig config_of(const testing::TempDir& dir, const std::string& json) {
  write_text(dir.file("config.json"), json);
  return read_hf_config(dir.path());
}

// export(cfg) -> import -> export: both directories' files equal byte for byte, and the import
// gives cfg's Hugging Face fields back.
void expect_round_trip(const model::ModelConfig& cfg, const std::string& model_type) {
  testing::TempDir a, b;
  model::GPTModel m(cfg, DType::kF32, 5);
  export_hf(
      cfg, m.params(), [](const model::Parameter& p) { return p.value; },
      a.file("model.safetensors"));
  const model::ModelConfig back = read_hf_config(a.path());
  EXPECT_EQ(hf_model_type(back), model_type);
  EXPECT_EQ(back.rope_scaling, cfg.rope_scaling);
  EXPECT_EQ(back.add_qkv_bias, cfg.add_qkv_bias);
  EXPECT_EQ(back.add_bias_linear, cfg.add_bias_linear);
  EXPECT_EQ(back.sliding_window, cfg.sliding_window);
  EXPECT_EQ(back.rotary_base, cfg.rotary_base);
  const auto weights = read_hf_weights(a.path(), back);
  model::GPTModel imported(back, DType::kF32, 6);
  export_hf(
      back, imported.params(),
      [&](const model::Parameter& p) {
        Tensor t = Tensor::zeros(p.global_shape, DType::kF32, MemoryCategory::kOther);
        const Tensor& w = weights.at(p.name);
        std::memcpy(t.raw(), w.raw(), static_cast<size_t>(w.numel()) * sizeof(float));
        return t;
      },
      b.file("model.safetensors"));
  EXPECT_EQ(slurp(a.file("config.json")), slurp(b.file("config.json")));
  EXPECT_EQ(slurp(a.file("model.safetensors")), slurp(b.file("model.safetensors")));
}

model::ModelConfig tiny_llama() {
  model::ModelConfig c = model::preset("llama-tiny");
  c.vocab_size = 50;
  return c;
}

TEST(HfFamilies, Llama3RopeScalingRoundTrips) {
  model::ModelConfig c = tiny_llama();
  c.rotary_base = 500000.0f;
  c.rope_scaling = {true, 8.0f, 1.0f, 4.0f, 8192};  // Llama 3.1's
  expect_round_trip(c, "llama");
  c.rope_scaling = {true, 32.0f, 1.5f, 4.25f, 100};  // any values come back
  expect_round_trip(c, "llama");
}

TEST(HfFamilies, Qwen2RoundTripsWithAndWithoutWindow) {
  model::ModelConfig c = tiny_llama();
  c.add_bias_linear = false;
  c.add_qkv_bias = true;
  c.untie_embeddings_and_output_weights = false;
  expect_round_trip(c, "qwen2");
  c.sliding_window = 16;  // every layer (max_window_layers 0)
  expect_round_trip(c, "qwen2");
}

TEST(HfFamilies, MistralRoundTrips) {
  model::ModelConfig c = tiny_llama();
  c.sliding_window = 24;
  expect_round_trip(c, "mistral");
  c.rope_scaling = {true, 8.0f, 1.0f, 4.0f, 8192};
  expect_round_trip(c, "mistral");
}

TEST(HfFamilies, ConfigsTakeEachClassDefaults) {
  testing::TempDir dir;
  const model::ModelConfig q = config_of(dir, R"({"model_type": "qwen2"})");
  EXPECT_EQ(q.vocab_size, 151936);
  EXPECT_EQ(q.ffn(), 22016);
  EXPECT_EQ(q.max_positions(), 32768);
  EXPECT_FALSE(q.group_query_attention);  // num_key_value_heads 32 = heads
  EXPECT_TRUE(q.add_qkv_bias);
  EXPECT_FALSE(q.add_bias_linear);
  EXPECT_EQ(q.sliding_window, 0);  // use_sliding_window false
  const model::ModelConfig m = config_of(dir, R"({"model_type": "mistral"})");
  EXPECT_EQ(m.kv_heads(), 8);
  EXPECT_EQ(m.ffn(), 14336);
  EXPECT_EQ(m.max_positions(), 131072);
  EXPECT_EQ(m.sliding_window, 4096);  // absent: MistralConfig's default
  EXPECT_FALSE(m.add_bias_linear || m.add_qkv_bias);
  EXPECT_EQ(config_of(dir, R"({"model_type": "mistral", "sliding_window": null})").sliding_window,
            0);  // null: full attention (Mistral 7B v0.2 and later)
  EXPECT_EQ(config_of(dir, R"({"model_type": "mixtral", "sliding_window": 128})").sliding_window,
            128);
}

TEST(HfFamilies, RopeScalingSpellings) {
  testing::TempDir dir;
  // Transformers 4.x (Llama 3.1's config.json), the legacy "type" key, and rope_parameters.
  const char* configs[] = {
      R"({"model_type": "llama", "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192, "rope_type": "llama3"}})",
      R"({"model_type": "llama", "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192, "type": "llama3"}})",
      R"({"model_type": "llama", "rope_parameters": {"rope_theta": 500000.0, "factor": 8.0,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192, "rope_type": "llama3"}})",
  };
  for (const char* json : configs) {
    const model::ModelConfig c = config_of(dir, json);
    EXPECT_EQ(c.rope_scaling, (kernels::RopeScaling{true, 8.0f, 1.0f, 4.0f, 8192})) << json;
    EXPECT_EQ(c.rotary_base, 500000.0f) << json;
  }
}

TEST(HfFamilies, RefusalsNameFileAndKey) {
  testing::TempDir dir;
  const std::string file = dir.file("config.json");
  struct Case {
    const char* json;
    const char* says;
  };
  const Case cases[] = {
      {R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})",
       "key 'rope_scaling': rope_type 'yarn' is not supported"},
      {R"({"model_type": "llama", "rope_scaling": {"type": "dynamic", "factor": 2.0}})",
       "key 'rope_scaling': rope_type 'dynamic' is not supported"},
      {R"({"model_type": "qwen2", "rope_parameters": {"rope_type": "linear", "factor": 2.0}})",
       "key 'rope_parameters': rope_type 'linear' is not supported"},
      {R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})",
       "key 'rope_scaling': rope_type llama3 needs the number 'low_freq_factor'"},
      {R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
          "low_freq_factor": 4.0, "high_freq_factor": 1.0,
          "original_max_position_embeddings": 8192}})",
       "key 'rope_scaling': expected 0 < low_freq_factor < high_freq_factor"},
      {R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0, "attention_factor": 2.0,
          "original_max_position_embeddings": 8192}})",
       "key 'rope_scaling': key 'attention_factor' of rope_type llama3 is not supported"},
      {R"({"model_type": "qwen2", "num_hidden_layers": 4, "use_sliding_window": true,
          "sliding_window": 8, "max_window_layers": 2})",
       "key 'max_window_layers': 2 (with use_sliding_window)"},
      {R"({"model_type": "qwen2", "num_hidden_layers": 2, "use_sliding_window": true,
          "layer_types": ["full_attention", "sliding_attention"]})",
       "key 'layer_types': sliding windows on some layers only"},
      {R"({"model_type": "mistral", "sliding_window": 0})", "key 'sliding_window'"},
      {R"({"model_type": "falcon"})", "key 'model_type': 'falcon' is not supported"},
  };
  for (const Case& c : cases) {
    write_text(file, c.json);
    const std::string msg = error_of([&] { read_hf_config(dir.path()); });
    EXPECT_EQ(msg.rfind(file + ": ", 0), 0u) << c.json << " -> " << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.json << " -> " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(HfFamilies, QwenWindowOnEveryLayerOrNone) {
  testing::TempDir dir;
  EXPECT_EQ(config_of(dir, R"({"model_type": "qwen2", "num_hidden_layers": 4,
      "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 0})")
                .sliding_window,
            8);
  EXPECT_EQ(config_of(dir, R"({"model_type": "qwen2", "num_hidden_layers": 4,
      "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 4})")
                .sliding_window,
            0);
  EXPECT_EQ(config_of(dir, R"({"model_type": "qwen2", "num_hidden_layers": 2,
      "use_sliding_window": false, "sliding_window": 8, "max_window_layers": 1})")
                .sliding_window,
            0);
}

TEST(HfFamilies, ExportRefusesWhatNoClassHolds) {
  model::ModelConfig c = tiny_llama();
  c.add_bias_linear = true;
  c.sliding_window = 8;  // Mistral has no biases, Qwen2 only q/k/v ones
  EXPECT_NE(error_of([&] { check_hf_exportable(c); }).find("sliding_window"), std::string::npos);
  model::ModelConfig g = model::preset("gpt2-tiny");
  g.add_bias_linear = false;
  g.add_qkv_bias = true;
  EXPECT_NE(error_of([&] { check_hf_exportable(g); }).find("--add-qkv-bias"), std::string::npos);
}

}  // namespace
}  // namespace tessera::checkpoint
