// Hugging Face import: export -> import is bitwise for both families (single file and shards),
// configs round trip and take Transformers' defaults, hand-written BF16/F16 files widen exactly,
// and every refusal names the file and the tensor or key.
#include "tessera/checkpoint/hf_import.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/hf_testing.h"
#include "tessera/checkpoint/hf_export.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/model/gpt_model.h"
#include "testing/temp_dir.h"

namespace tessera::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing_hf::write_text;

// Exports m's values (its compute dtype must be fp32) to dir.
void export_model(const model::GPTModel& m, const std::string& dir,
                  int64_t max_shard_bytes = 5'000'000'000) {
  export_hf(
      m.config(), m.params(), [](const model::Parameter& p) { return p.value; },
      dir + "/model.safetensors", max_shard_bytes);
}

// Every parameter of m equals the imported tensor bitwise on its real (unpadded) rows.
void expect_bitwise(const model::GPTModel& m, const std::map<std::string, Tensor>& got) {
  EXPECT_EQ(got.size(), m.params().all().size());
  for (const model::Parameter& p : m.params().all()) {
    ASSERT_TRUE(got.count(p.name)) << p.name;
    const Tensor& t = got.at(p.name);
    Shape want = p.global_shape;
    if (p.shard.vocab_rows > 0) want[0] = p.shard.vocab_rows;
    ASSERT_EQ(t.shape(), want) << p.name;
    ASSERT_EQ(t.dtype(), DType::kF32);
    EXPECT_EQ(std::memcmp(t.raw(), p.value.raw(), shape_numel(want) * sizeof(float)), 0) << p.name;
  }
}

// The ModelConfig fields a Hugging Face config holds agree.
void expect_same_hf_fields(const model::ModelConfig& a, const model::ModelConfig& b) {
  EXPECT_EQ(a.family(), b.family());
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.kv_heads(), b.kv_heads());
  EXPECT_EQ(a.group_query_attention, b.group_query_attention);
  EXPECT_EQ(a.ffn(), b.ffn());
  EXPECT_EQ(a.max_positions(), b.max_positions());
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.normalization, b.normalization);
  EXPECT_EQ(a.norm_epsilon, b.norm_epsilon);
  EXPECT_EQ(a.swiglu, b.swiglu);
  EXPECT_EQ(a.position_embedding, b.position_embedding);
  if (a.position_embedding == model::PositionEmbedding::kRope) {
    EXPECT_EQ(a.rotary_base, b.rotary_base);
  }
  EXPECT_EQ(a.untie_embeddings_and_output_weights, b.untie_embeddings_and_output_weights);
  EXPECT_EQ(a.add_bias_linear, b.add_bias_linear);
  EXPECT_EQ(a.attention_dropout, b.attention_dropout);
  EXPECT_EQ(a.hidden_dropout, b.hidden_dropout);
  EXPECT_EQ(a.init_method_std, b.init_method_std);
}

TEST(HfImport, Gpt2TinyRoundTripIsBitwise) {
  testing::TempDir dir;
  const model::ModelConfig cfg = model::preset("gpt2-tiny");  // 257 tokens, padded to 384
  model::GPTModel m(cfg, DType::kF32, 11);
  export_model(m, dir.path());
  EXPECT_TRUE(is_hf_directory(dir.path()));
  const model::ModelConfig back = read_hf_config(dir.path());
  expect_same_hf_fields(cfg, back);
  EXPECT_EQ(back.seq_length, cfg.max_positions());  // HF configs hold no training length
  expect_bitwise(m, read_hf_weights(dir.path(), back));
}

TEST(HfImport, LlamaTinyRoundTripIsBitwise) {
  testing::TempDir dir;
  const model::ModelConfig cfg = model::preset("llama-tiny");  // GQA 4:2, untied, no biases
  model::GPTModel m(cfg, DType::kF32, 12);
  export_model(m, dir.path());
  const model::ModelConfig back = read_hf_config(dir.path());
  expect_same_hf_fields(cfg, back);
  expect_bitwise(m, read_hf_weights(dir.path(), back));
}

TEST(HfImport, NonDefaultOptionsRoundTrip) {
  model::ModelConfig gpt2 = model::preset("gpt2-tiny");
  gpt2.untie_embeddings_and_output_weights = true;  // lm_head.weight is written and read
  gpt2.norm_epsilon = 1e-6f;
  gpt2.hidden_dropout = 0.05f;
  gpt2.attention_dropout = 0.0f;
  gpt2.init_method_std = 0.01f;
  gpt2.ffn_hidden_size = 96;
  model::ModelConfig llama = model::preset("llama-tiny");
  llama.untie_embeddings_and_output_weights = false;  // a stored lm_head would be ignored
  llama.add_bias_linear = true;                       // attention_bias and mlp_bias
  llama.group_query_attention = false;                // num_key_value_heads = heads
  llama.num_query_groups = 4;
  llama.rotary_base = 500000.0f;
  llama.attention_dropout = 0.1f;
  for (const model::ModelConfig& cfg : {gpt2, llama}) {
    testing::TempDir dir;
    model::GPTModel m(cfg, DType::kF32, 13);
    export_model(m, dir.path());
    const model::ModelConfig back = read_hf_config(dir.path());
    expect_same_hf_fields(cfg, back);
    expect_bitwise(m, read_hf_weights(dir.path(), back));
  }
}

TEST(HfImport, MissingKeysTakeTransformersDefaults) {
  testing::TempDir dir;
  write_text(dir.file("config.json"), R"({"model_type": "gpt2"})");
  const model::ModelConfig g = read_hf_config(dir.path());  // GPT2Config()
  EXPECT_EQ(g.family(), model::Family::kGpt2);
  EXPECT_EQ(g.vocab_size, 50257);
  EXPECT_EQ(g.max_positions(), 1024);
  EXPECT_EQ(g.hidden_size, 768);
  EXPECT_EQ(g.num_layers, 12);
  EXPECT_EQ(g.num_attention_heads, 12);
  EXPECT_EQ(g.ffn(), 4 * 768);  // n_inner null
  EXPECT_EQ(g.norm_epsilon, 1e-5f);
  EXPECT_EQ(g.hidden_dropout, 0.1f);
  EXPECT_FALSE(g.untie_embeddings_and_output_weights);
  EXPECT_TRUE(g.add_bias_linear);

  write_text(dir.file("config.json"),
             R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                 "intermediate_size": 128, "num_hidden_layers": 1, "vocab_size": 100,
                 "num_key_value_heads": null})");
  const model::ModelConfig l = read_hf_config(dir.path());  // LlamaConfig(...)
  EXPECT_EQ(l.family(), model::Family::kLlama);
  EXPECT_EQ(l.kv_heads(), 4);
  EXPECT_FALSE(l.group_query_attention);
  EXPECT_EQ(l.norm_epsilon, 1e-6f);
  EXPECT_EQ(l.rotary_base, 10000.0f);
  EXPECT_EQ(l.max_positions(), 2048);
  EXPECT_TRUE(l.untie_embeddings_and_output_weights);
  EXPECT_FALSE(l.add_bias_linear);
  EXPECT_EQ(l.attention_dropout, 0.0f);
  EXPECT_EQ(l.hidden_dropout, 0.0f);
  EXPECT_EQ(l.normalization, model::Normalization::kRMSNorm);
  EXPECT_TRUE(l.swiglu);
  EXPECT_EQ(l.position_embedding, model::PositionEmbedding::kRope);
}

TEST(HfImport, ShardedExportReadsBackBitwise) {
  testing::TempDir dir;
  const model::ModelConfig cfg = model::preset("gpt2-tiny");
  model::GPTModel m(cfg, DType::kF32, 14);
  // 40 KB shards: wte (257x64 fp32 = 65792 bytes) and each 64x256 MLP weight exceed it and sit
  // alone; the small tensors share shards.
  constexpr int64_t kShard = 40'000;
  export_model(m, dir.path(), kShard);
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors")));
  std::ifstream in(dir.file("model.safetensors.index.json"));
  const json index = json::parse(in);
  const json& map = index["weight_map"];
  std::set<std::string> files;
  int64_t total = 0;
  for (const auto& [name, file] : map.items()) files.insert(file.get<std::string>());
  ASSERT_GT(files.size(), 1u);
  std::set<std::string> expected_files;
  for (size_t i = 1; i <= files.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i, files.size());
    expected_files.insert(name);
  }
  EXPECT_EQ(files, expected_files);
  size_t tensors = 0;
  for (const std::string& file : files) {
    SafetensorsFile f(dir.file(file));
    int64_t bytes = 0;
    for (const std::string& n : f.names()) {
      EXPECT_EQ(map.at(n), file) << n;
      const SafeTensorInfo& info = f.info(n);
      bytes += static_cast<int64_t>(info.data_end - info.data_begin);
      ++tensors;
    }
    EXPECT_TRUE(f.names().size() == 1 || bytes <= kShard) << file << " holds " << bytes;
    total += bytes;
  }
  EXPECT_EQ(tensors, map.size());
  EXPECT_EQ(map.size(), m.params().all().size());
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  int64_t expected_total = 0;
  for (const model::Parameter& p : m.params().all())
    expected_total += shape_numel(hf_tensor_shape(cfg, p)) * 4;
  EXPECT_EQ(total, expected_total);
  expect_bitwise(m, read_hf_weights(dir.path(), read_hf_config(dir.path())));
}

TEST(HfExport, StaleFilesOfTheOtherFormAreRemoved) {
  testing::TempDir dir;
  model::GPTModel m(model::preset("gpt2-tiny"), DType::kF32, 15);
  const auto listing = [&] {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir.path()))
      names.insert(e.path().filename().string());
    return names;
  };
  write_text(dir.file("notes.txt"), "kept");
  export_model(m, dir.path());
  export_model(m, dir.path(), 100'000);  // shards replace the single file
  std::set<std::string> sharded = listing();
  EXPECT_FALSE(sharded.count("model.safetensors"));
  EXPECT_TRUE(sharded.count("model.safetensors.index.json"));
  const size_t many = sharded.size();
  export_model(m, dir.path(), 300'000);  // fewer shards: the old higher-numbered ones go
  sharded = listing();
  EXPECT_LT(sharded.size(), many);
  for (const std::string& n : sharded) {
    if (n.rfind("model-", 0) != 0) continue;
    const std::string count = n.substr(n.find("-of-") + 4, 5);
    EXPECT_EQ(std::stoi(count), static_cast<int>(sharded.size()) - 3) << n;  // - index/config/notes
  }
  export_model(m, dir.path());  // and back to one file
  EXPECT_EQ(listing(), (std::set<std::string>{"config.json", "model.safetensors", "notes.txt"}));
  expect_bitwise(m, read_hf_weights(dir.path(), read_hf_config(dir.path())));
}

}  // namespace
}  // namespace tessera::checkpoint
