// Hugging Face import of files Tessera did not write: a hand-written BF16 GPT-2 checkpoint in
// the base model's naming with its mask buffers, an F16 LLaMA one, and the refusals (missing,
// misshapen, unexpected or wrongly typed tensors, truncated files, unsupported configs), each
// of which must name the file and the tensor or key.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_testing.h"
#include "tessera/checkpoint/hf_export.h"
#include "tessera/checkpoint/hf_import.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/model/gpt_model.h"
#include "testing/temp_dir.h"

namespace tessera::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing_hf::error_of;
using testing_hf::load;
using testing_hf::save;
using testing_hf::Stored;
using testing_hf::write_text;

// A BF16 tensor whose element i is bf16(base + i / 1024), plus the fp32 values it widens to.
struct Bf16Tensor {
  Stored stored;
  std::vector<float> widened;
};
Bf16Tensor bf16_tensor(const std::string& name, std::vector<int64_t> shape, float base) {
  Bf16Tensor t{{name, SafeDType::kBF16, shape, {}}, {}};
  const int64_t n = shape_numel(shape);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t bits = bf16::from_float(base + static_cast<float>(i) / 1024.0f);
    t.stored.bytes.push_back(static_cast<unsigned char>(bits & 0xff));
    t.stored.bytes.push_back(static_cast<unsigned char>(bits >> 8));
    t.widened.push_back(bf16::to_float(bits));
  }
  return t;
}

TEST(HfImportFiles, Bf16Gpt2InBaseModelNamingWithBuffers) {
  testing::TempDir dir;
  // GPT2Config defaults for everything but the sizes; no n_inner (4C), no tie flag (tied).
  write_text(dir.file("config.json"), R"({"model_type": "gpt2", "vocab_size": 11,
      "n_positions": 16, "n_embd": 8, "n_layer": 1, "n_head": 2})");
  constexpr int64_t V = 11, P = 16, C = 8, F = 32;
  // Stored names and [in, out] Conv1D shapes as GPT2Model (no "transformer.") saves them.
  const std::vector<std::pair<std::string, std::vector<int64_t>>> layout = {
      {"wte.weight", {V, C}},
      {"wpe.weight", {P, C}},
      {"h.0.ln_1.weight", {C}},
      {"h.0.ln_1.bias", {C}},
      {"h.0.attn.c_attn.weight", {C, 3 * C}},
      {"h.0.attn.c_attn.bias", {3 * C}},
      {"h.0.attn.c_proj.weight", {C, C}},
      {"h.0.attn.c_proj.bias", {C}},
      {"h.0.ln_2.weight", {C}},
      {"h.0.ln_2.bias", {C}},
      {"h.0.mlp.c_fc.weight", {C, F}},
      {"h.0.mlp.c_fc.bias", {F}},
      {"h.0.mlp.c_proj.weight", {F, C}},
      {"h.0.mlp.c_proj.bias", {C}},
      {"ln_f.weight", {C}},
      {"ln_f.bias", {C}},
  };
  std::vector<Stored> file;
  std::map<std::string, std::vector<float>> widened;
  float base = 0.5f;
  for (const auto& [name, shape] : layout) {
    Bf16Tensor t = bf16_tensor(name, shape, base);
    base += 0.25f;
    widened[name] = t.widened;
    file.push_back(t.stored);
  }
  // Buffers older checkpoints hold, and a head a tied model ignores.
  file.push_back(
      {"h.0.attn.bias", SafeDType::kU8, {1, 1, P, P}, std::vector<unsigned char>(P * P, 1)});
  file.push_back({"h.0.attn.masked_bias", SafeDType::kF32, {}, std::vector<unsigned char>(4, 0)});
  file.push_back(bf16_tensor("lm_head.weight", {V, C}, -3.0f).stored);
  save(dir.file("model.safetensors"), file);

  const model::ModelConfig cfg = read_hf_config(dir.path());
  EXPECT_EQ(cfg.ffn(), F);
  const auto got = read_hf_weights(dir.path(), cfg);
  ASSERT_EQ(got.size(), layout.size());
  for (const auto& [name, shape] : layout) {
    const Tensor& t = got.at("transformer." + name);
    const std::vector<float>& want = widened.at(name);
    const bool conv1d = name.find("c_") != std::string::npos && name.ends_with(".weight");
    if (!conv1d) {
      ASSERT_EQ(t.shape(), shape) << name;
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(t.data<float>()[i], want[i]) << name;
      continue;
    }
    // Stored [in, out]; Tessera holds (out, in).
    const int64_t in = shape[0], out = shape[1];
    ASSERT_EQ(t.shape(), (Shape{out, in})) << name;
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c)
        ASSERT_EQ(t.data<float>()[r * in + c], want[c * out + r]) << name << " " << r << "," << c;
  }
}

TEST(HfImportFiles, F16LlamaWidensExactly) {
  testing::TempDir fp32_dir, f16_dir;
  model::GPTModel m(model::preset("llama-tiny"), DType::kF32, 21);
  export_hf(
      m.config(), m.params(), [](const model::Parameter& p) { return p.value; },
      fp32_dir.file("model.safetensors"));
  fs::copy_file(fp32_dir.file("config.json"), f16_dir.file("config.json"));
  std::vector<Stored> tensors = load(fp32_dir.file("model.safetensors"));
  for (Stored& t : tensors) {
    std::vector<unsigned char> half(t.bytes.size() / 2);
    for (size_t i = 0; i < t.bytes.size() / 4; ++i) {
      float x;
      std::memcpy(&x, t.bytes.data() + 4 * i, 4);
      const fp16 h(x);
      std::memcpy(half.data() + 2 * i, &h.bits, 2);
    }
    t.dtype = SafeDType::kF16;
    t.bytes = std::move(half);
  }
  save(f16_dir.file("model.safetensors"), tensors);
  const auto got = read_hf_weights(f16_dir.path(), read_hf_config(f16_dir.path()));
  for (const model::Parameter& p : m.params().all()) {
    const Tensor& t = got.at(p.name);
    for (int64_t i = 0; i < t.numel(); ++i)
      ASSERT_EQ(t.data<float>()[i], static_cast<float>(fp16(p.value.data<float>()[i])))
          << p.name << "[" << i << "]";
  }
}

// An exported gpt2-tiny directory to break in the tests below.
class HfImportErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    model::GPTModel m(model::preset("gpt2-tiny"), DType::kF32, 3);
    export_hf(
        m.config(), m.params(), [](const model::Parameter& p) { return p.value; }, weights());
    cfg_ = read_hf_config(dir_.path());
  }
  std::string weights() const { return dir_.file("model.safetensors"); }
  // Rewrites the weights file after `edit`.
  template <typename F>
  void edit_weights(F&& edit) {
    std::vector<Stored> tensors = load(weights());
    edit(tensors);
    save(weights(), tensors);
  }
  std::string import_error() {
    return error_of([&] { read_hf_weights(dir_.path(), cfg_); });
  }
  std::string config_error(const std::string& json) {
    write_text(dir_.file("config.json"), json);
    return error_of([&] { read_hf_config(dir_.path()); });
  }

  testing::TempDir dir_;
  model::ModelConfig cfg_;
};

TEST_F(HfImportErrors, MissingTensorNamesFileAndTensor) {
  edit_weights([](std::vector<Stored>& t) {
    std::erase_if(t, [](const Stored& s) { return s.name == "transformer.h.1.mlp.c_fc.bias"; });
  });
  const std::string msg = import_error();
  EXPECT_NE(msg.find(weights()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'transformer.h.1.mlp.c_fc.bias'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[256]"), std::string::npos) << msg;
}

TEST_F(HfImportErrors, WrongShapeNamesBothShapes) {
  edit_weights([](std::vector<Stored>& t) {
    for (Stored& s : t) {
      if (s.name != "transformer.ln_f.weight") continue;
      s.shape = {63};
      s.bytes.resize(63 * 4);
    }
  });
  const std::string msg = import_error();
  EXPECT_NE(msg.find(weights()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'transformer.ln_f.weight' has shape [63], expected [64]"), std::string::npos)
      << msg;
}

TEST_F(HfImportErrors, UnsupportedDtypeAndUnexpectedTensor) {
  edit_weights([](std::vector<Stored>& t) {
    for (Stored& s : t)
      if (s.name == "transformer.wpe.weight") s.dtype = SafeDType::kI32;
  });
  std::string msg = import_error();
  EXPECT_NE(msg.find("'transformer.wpe.weight': dtype I32"), std::string::npos) << msg;
  edit_weights([](std::vector<Stored>& t) {
    for (Stored& s : t)
      if (s.name == "transformer.wpe.weight") s.dtype = SafeDType::kF32;
    t.push_back({"transformer.h.0.attn.q_norm.weight", SafeDType::kF32, {1}, {0, 0, 0, 0}});
  });
  msg = import_error();
  EXPECT_NE(msg.find(weights()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'transformer.h.0.attn.q_norm.weight' is not a parameter"), std::string::npos)
      << msg;
}

TEST_F(HfImportErrors, TruncatedFileNamesTheFile) {
  fs::resize_file(weights(), fs::file_size(weights()) / 2);
  const std::string msg = import_error();
  EXPECT_NE(msg.find(weights()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(HfImportErrors, BadIndexAndMissingShardNameTheFile) {
  fs::remove(weights());
  EXPECT_FALSE(is_hf_directory(dir_.path()));
  std::string msg = import_error();
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
  write_text(dir_.file("model.safetensors.index.json"),
             R"({"metadata": {"total_size": 4}, "weight_map": {"transformer.wte.weight":
                 "model-00001-of-00002.safetensors"}})");
  EXPECT_TRUE(is_hf_directory(dir_.path()));
  msg = import_error();
  EXPECT_NE(msg.find(dir_.file("model-00001-of-00002.safetensors")), std::string::npos) << msg;
  write_text(dir_.file("model.safetensors.index.json"),
             R"({"weight_map": {"transformer.wte.weight": "../elsewhere.safetensors"}})");
  msg = import_error();
  EXPECT_NE(msg.find("'transformer.wte.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("../elsewhere.safetensors"), std::string::npos) << msg;
}

TEST_F(HfImportErrors, AShardWithoutTheTensorItsIndexPlacesThereNamesBoth) {
  // Every tensor in one shard, but wte placed by the index in a second shard that lacks it.
  const std::vector<Stored> tensors = load(weights());
  fs::remove(weights());
  save(dir_.file("model-00001-of-00002.safetensors"), tensors);
  save(dir_.file("model-00002-of-00002.safetensors"),
       {{"unrelated", SafeDType::kF32, {1}, std::vector<unsigned char>(4, 0)}});
  nlohmann::json index;
  for (const Stored& t : tensors) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  index["weight_map"]["transformer.wte.weight"] = "model-00002-of-00002.safetensors";
  write_text(dir_.file("model.safetensors.index.json"), index.dump());
  const std::string msg = import_error();
  EXPECT_NE(msg.find(dir_.file("model-00002-of-00002.safetensors") +
                     ": has no tensor 'transformer.wte.weight'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
}

TEST_F(HfImportErrors, ConfigRefusalsNameFileAndKey) {
  const std::string file = dir_.file("config.json");
  struct Case {
    const char* json;
    const char* key;
  };
  const Case cases[] = {
      {R"({"model_type": "bert"})", "key 'model_type': 'bert' is not supported"},
      {R"({"n_embd": 64})", "key 'model_type': missing"},
      {R"({"model_type": "gpt2", "activation_function": "relu"})", "key 'activation_function'"},
      {R"({"model_type": "gpt2", "n_embd": "64"})", "key 'n_embd': expected an integer"},
      {R"({"model_type": "gpt2", "n_embd": 64, "n_head": 5})", "key 'n_head'"},
      {R"({"model_type": "gpt2", "resid_pdrop": 1.5})", "key 'resid_pdrop'"},
      {R"({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": true})",
       "key 'scale_attn_by_inverse_layer_idx'"},
      {R"({"model_type": "llama", "rope_scaling": {"rope_type": "linear", "factor": 2.0}})",
       "key 'rope_scaling': rope_type 'linear' is not supported"},
      {R"({"model_type": "llama", "hidden_act": "gelu"})", "key 'hidden_act'"},
      {R"({"model_type": "llama", "head_dim": 64})", "key 'head_dim'"},
      {R"({"model_type": "llama", "num_key_value_heads": 5})", "key 'num_key_value_heads'"},
      {R"({"model_type": "llama", "attention_bias": true})", "key 'mlp_bias'"},
      {R"({"model_type": "gpt2",)", "not valid JSON"},
  };
  for (const Case& c : cases) {
    const std::string msg = config_error(c.json);
    EXPECT_EQ(msg.rfind(file + ": ", 0), 0u) << c.json << " -> " << msg;
    EXPECT_NE(msg.find(c.key), std::string::npos) << c.json << " -> " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  fs::remove(file);
  EXPECT_NE(error_of([&] { read_hf_config(dir_.path()); }).find(file), std::string::npos);
}

TEST_F(HfImportErrors, RopeDefaultTypeIsPlainRope) {
  // Newer Transformers spell plain RoPE as a "default" rope type carrying theta.
  write_text(dir_.file("config.json"),
             R"({"model_type": "llama", "rope_scaling": null,
                 "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})");
  EXPECT_EQ(read_hf_config(dir_.path()).rotary_base, 500000.0f);
}

}  // namespace
}  // namespace tessera::checkpoint
