// Quantized Hugging Face-style directories (checkpoint/quantized_hf.h):
//  - quantizing q, k and v (or gate and up) each on its own rows gives the bits of quantizing
//    the fused matrix the model runs, in every format (scales only look along a row);
//  - a directory written by write_quantized_hf holds, for each weight quantize_weights
//    quantizes, exactly quant::quantize of its values, and loading it gives the model that
//    --quantize gives on the unquantized directory: the same loss, bit for bit (untied and tied
//    output layers, quantized or not);
//  - tensor-parallel shards: a column-parallel weight's rows, a row-parallel weight's columns
//    with the whole row's scale for fp6 and int8; a column range that splits q4's groups is
//    refused;
//  - sharded directories (a tied output layer quantized among them) and an MoE model with a
//    shared expert load as --quantize makes them, experts and shared experts stored as codes,
//    routers F32; writing one form over the other leaves only its files; a shard whose
//    metadata names another format is refused, named;
//  - reading the quantized directory for training is refused.
#include "tessera/checkpoint/quantized_hf.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>

#include "tessera/checkpoint/hf_export.h"
#include "tessera/checkpoint/hf_import.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"
#include "tessera/core/threads.h"
#include "tessera/inference/load_model.h"
#include "testing/llama_style.h"
#include "testing/temp_dir.h"

namespace tessera::checkpoint {
namespace {

using quant::QuantFormat;
using quant::QuantizedMatrix;

std::vector<float> normal(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

void expect_same_bits(const QuantizedMatrix& a, const QuantizedMatrix& b, const std::string& what) {
  EXPECT_EQ(a.format, b.format) << what;
  EXPECT_EQ(a.rows, b.rows) << what;
  EXPECT_EQ(a.cols, b.cols) << what;
  EXPECT_EQ(a.group, b.group) << what;
  EXPECT_EQ(a.codes, b.codes) << what;
  EXPECT_EQ(a.scales, b.scales) << what;
  EXPECT_EQ(a.mins, b.mins) << what;
}

struct Case {
  QuantFormat format;
  int64_t q4_group;
};
const Case kCases[] = {{QuantFormat::kFp6, 32},
                       {QuantFormat::kInt8, 32},
                       {QuantFormat::kQ8_0, 32},
                       {QuantFormat::kQ4, 32},
                       {QuantFormat::kQ4, 64}};

std::string name_of(const Case& c) {
  return std::string(quant::quant_format_name(c.format)) + "/" + std::to_string(c.q4_group);
}

TEST(QuantizedHf, SeparateRowBlocksEqualTheFusedMatrix) {
  const int64_t cols = 128;
  const std::vector<int64_t> blocks = {16, 8, 8};  // q, k, v rows of a GQA layer
  const std::vector<float> w = normal(32 * cols, 1);
  for (const Case& c : kCases) {
    const QuantizedMatrix fused = quant::quantize(w.data(), 32, cols, c.format, c.q4_group);
    QuantizedMatrix joined;
    int64_t row = 0;
    for (int64_t rows : blocks) {
      const QuantizedMatrix part =
          quant::quantize(w.data() + row * cols, rows, cols, c.format, c.q4_group);
      if (row == 0) {
        joined = part;
      } else {
        joined.rows += part.rows;
        joined.codes.insert(joined.codes.end(), part.codes.begin(), part.codes.end());
        joined.scales.insert(joined.scales.end(), part.scales.begin(), part.scales.end());
        joined.mins.insert(joined.mins.end(), part.mins.begin(), part.mins.end());
      }
      row += rows;
    }
    expect_same_bits(joined, fused, name_of(c));
  }
}

model::ModelConfig small_llama(bool tied) {
  model::ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 16;
  c.max_position_embeddings = 16;
  c.vocab_size = 96;  // padded to 128: the padded rows of the output layer are quantized zeros
  c.init_method_std = 0.05f;
  c.attention_dropout = 0.0f;
  c.hidden_dropout = 0.0f;
  testing::make_llama_style(c, 2);
  c.untie_embeddings_and_output_weights = !tied;
  c.ffn_hidden_size = 128;
  return c;
}

std::function<Tensor(const model::Parameter&)> master_of(const model::GPTModel& m) {
  return [&m](const model::Parameter& p) {
    return m.params().get(p.name).value.clone(MemoryCategory::kOther);
  };
}

double loss(model::GPTModel& m) {
  std::vector<int32_t> tokens(12), targets(12, 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((7 * i + 3) % 96);
  const model::Batch batch{tokens.data(), targets.data(), nullptr, 1, 12};
  return m.forward_loss(batch, m.context(1, 12, 0, 0, 0, false)).loss_sum;
}

TEST(QuantizedHf, ADirectoryLoadsAsQuantizingOnLoad) {
  set_num_threads(1);
  for (const bool tied : {false, true}) {
    const model::ModelConfig cfg = small_llama(tied);
    const model::GPTModel source(cfg, DType::kF32, 5);
    testing::TempDir dir;
    std::filesystem::create_directories(dir.file("plain"));
    export_hf(cfg, source.params(), master_of(source), dir.file("plain/model.safetensors"));
    for (const Case& c : kCases) {
      for (const bool output_layer : {false, true}) {
        const std::string what = name_of(c) + (tied ? " tied" : " untied") +
                                 (output_layer ? " with the output layer" : "");
        QuantSpec spec;
        spec.format = c.format;
        spec.q4_group = c.q4_group;
        spec.output_layer = output_layer;
        const std::string qdir = dir.file("q");
        write_quantized_hf(cfg, master_of(source), spec, qdir);
        ASSERT_TRUE(read_quant_spec(qdir).has_value()) << what;

        // The stored bits are quant::quantize of each weight on its own.
        const QuantizedWeights stored(qdir, cfg, *read_quant_spec(qdir));
        std::set<std::string> expected;
        for (const model::Parameter& p : source.params().all()) {
          const bool linear = p.name.find("_proj.weight") != std::string::npos;
          if (!linear) continue;
          expected.insert(p.name);
          expect_same_bits(stored.whole(p.name),
                           quant::quantize(p.value.data<float>(), p.local_shape[0],
                                           p.local_shape[1], c.format, c.q4_group),
                           what + " " + p.name);
        }
        if (output_layer) {
          expected.insert("lm_head.weight");
          const model::Parameter& head =
              source.params().get(tied ? "model.embed_tokens.weight" : "lm_head.weight");
          expect_same_bits(stored.whole("lm_head.weight"),
                           quant::quantize(head.value.data<float>(), cfg.vocab_size,
                                           cfg.hidden_size, c.format, c.q4_group),
                           what + " lm_head.weight");
        }
        EXPECT_EQ(stored.names(), expected) << what;

        // Loaded: the model --quantize makes of the unquantized directory, bit for bit.
        inference::LoadedModel on_load = inference::load_model(dir.file("plain"), DType::kF32);
        on_load.model->quantize_weights(c.format, c.q4_group, output_layer);
        inference::LoadedModel loaded = inference::load_model(qdir, DType::kF32);
        EXPECT_EQ(loaded.quantized, quant::quant_format_name(c.format));
        EXPECT_EQ(loss(*loaded.model), loss(*on_load.model)) << what;
        inference::LoadedModel plain = inference::load_model(dir.file("plain"), DType::kF32);
        EXPECT_NE(loss(*loaded.model), loss(*plain.model)) << what << ": quantized at all?";
      }
    }
  }
}

// The weight files under `dir`: model.safetensors, the index and the shards.
std::set<std::string> weight_files(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("model", 0) == 0) out.insert(name);
  }
  return out;
}

// Sharded directories (a tied output layer quantized, written after every parameter) and an MoE
// model with a shared expert (DeepSeek-V3's names): the stored experts and shared expert are the
// codes of quant::quantize, the router F32, and the loaded model is the one --quantize makes.
// Writing the other form into the same directory leaves only its files; a shard whose metadata
// disagrees is named.
TEST(QuantizedHf, ShardedAndMoeDirectoriesLoadAsQuantizingOnLoad) {
  set_num_threads(1);
  model::ModelConfig moe = small_llama(false);
  moe.moe.num_experts = 4;
  moe.moe.topk = 2;
  moe.moe.ffn_hidden_size = 64;
  moe.moe.shared_expert_size = 96;
  struct Setup {
    const char* what;
    model::ModelConfig cfg;
    bool output_layer;
  };
  for (const Setup& setup : {Setup{"tied llama", small_llama(true), true},
                             Setup{"moe with a shared expert", moe, false}}) {
    const model::ModelConfig& cfg = setup.cfg;
    const model::GPTModel source(cfg, DType::kF32, 5);
    testing::TempDir dir;
    std::filesystem::create_directories(dir.file("plain"));
    export_hf(cfg, source.params(), master_of(source), dir.file("plain/model.safetensors"));
    for (const QuantFormat format : {QuantFormat::kQ8_0, QuantFormat::kFp6}) {
      QuantSpec spec;
      spec.format = format;
      spec.output_layer = setup.output_layer;
      const std::string what = std::string(setup.what) + " " + quant::quant_format_name(format);
      const std::string qdir = dir.file("q");
      write_quantized_hf(cfg, master_of(source), spec, qdir);  // one file first
      EXPECT_EQ(weight_files(qdir), std::set<std::string>{"model.safetensors"}) << what;
      write_quantized_hf(cfg, master_of(source), spec, qdir, 20'000);  // then shards over it
      const std::set<std::string> files = weight_files(qdir);
      EXPECT_GE(files.size(), 4u) << what;
      EXPECT_FALSE(files.count("model.safetensors")) << what;
      EXPECT_TRUE(files.count("model.safetensors.index.json")) << what;

      const QuantizedWeights stored(qdir, cfg, *read_quant_spec(qdir));
      int experts = 0, shared = 0;
      for (const model::Parameter& p : source.params().all()) {
        if (p.name.find("_proj.weight") == std::string::npos) {
          EXPECT_FALSE(stored.names().count(p.name)) << what << " " << p.name;  // the routers
          continue;
        }
        experts += p.name.find(".experts.") != std::string::npos;
        shared += p.name.find(".shared_experts.") != std::string::npos;
        expect_same_bits(stored.whole(p.name),
                         quant::quantize(p.value.data<float>(), p.local_shape[0],
                                         p.local_shape[1], format, 32),
                         what + " " + p.name);
      }
      if (cfg.moe.enabled()) {
        EXPECT_EQ(experts, 2 * 4 * 3) << what;  // gate, up and down of 4 experts in 2 layers
        EXPECT_EQ(shared, 2 * 3) << what;
      }
      EXPECT_EQ(stored.names().count("lm_head.weight"), setup.output_layer ? 1u : 0u) << what;

      inference::LoadedModel on_load = inference::load_model(dir.file("plain"), DType::kF32);
      on_load.model->quantize_weights(format, 32, setup.output_layer);
      inference::LoadedModel loaded = inference::load_model(qdir, DType::kF32);
      EXPECT_EQ(loss(*loaded.model), loss(*on_load.model)) << what;

      // And back to one file: the shards and the index go.
      write_quantized_hf(cfg, master_of(source), spec, qdir);
      EXPECT_EQ(weight_files(qdir), std::set<std::string>{"model.safetensors"}) << what;
    }
    // One shard of a sharded directory with another format in its metadata.
    QuantSpec spec;
    spec.format = QuantFormat::kQ8_0;
    const std::string qdir = dir.file("bad");
    write_quantized_hf(cfg, master_of(source), spec, qdir, 20'000);
    const std::string shard = qdir + "/" + *std::next(weight_files(qdir).begin());  // the 2nd
    {
      const SafetensorsFile file(shard);
      std::vector<SafeTensorView> views;
      for (const std::string& name : file.names())
        views.push_back({name, file.info(name).dtype, file.info(name).shape, file.data(name)});
      write_safetensors(shard, views,
                        {{"format", "pt"}, {"quantization", "int8"},
                         {"quantization_group_size", "32"}});
    }
    const std::string msg = [&] {
      try {
        QuantizedWeights w(qdir, cfg, *read_quant_spec(qdir));
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    }();
    EXPECT_NE(msg.find(shard + ": __metadata__ \"quantization\": \"int8\", config.json says q8_0"),
              std::string::npos)
        << msg;
  }
}

TEST(QuantizedHf, TensorParallelShardsTakeRowsOrColumns) {
  const model::ModelConfig cfg = small_llama(false);
  const model::GPTModel source(cfg, DType::kF32, 5);
  testing::TempDir dir;
  for (const Case& c : kCases) {
    QuantSpec spec;
    spec.format = c.format;
    spec.q4_group = c.q4_group;
    spec.output_layer = true;
    write_quantized_hf(cfg, master_of(source), spec, dir.path());
    const QuantizedWeights stored(dir.path(), cfg, spec);
    for (int rank = 0; rank < 2; ++rank) {
      const model::ParameterSet shards = model::GPTModel::declare_part(cfg, 2, rank, {});
      // Column-parallel (q_proj, lm_head with its padded rows): this rank's rows.
      for (const std::string name : {"model.layers.1.self_attn.q_proj.weight", "lm_head.weight"}) {
        const model::Parameter& p = shards.get(name);
        const model::Parameter& whole = source.params().get(name);
        const int64_t first = p.pieces.at(0).global_begin, rows = p.local_shape[0];
        const float* from = whole.value.data<float>() + first * cfg.hidden_size;
        std::vector<float> values(from, from + rows * cfg.hidden_size);
        for (int64_t r = 0; r < rows; ++r)  // padded vocabulary rows load as zeros
          if (p.shard.vocab_rows > 0 && first + r >= p.shard.vocab_rows)
            std::fill_n(values.begin() + r * cfg.hidden_size, cfg.hidden_size, 0.0f);
        const QuantizedMatrix expected =
            quant::quantize(values.data(), rows, cfg.hidden_size, c.format, c.q4_group);
        expect_same_bits(stored.shard(name, p), expected, name_of(c) + " " + name);
      }
      // Row-parallel (o_proj: 64 columns, 32 a rank): this rank's columns.
      const std::string name = "model.layers.0.self_attn.o_proj.weight";
      const model::Parameter& p = shards.get(name);
      const int64_t first = p.pieces.at(0).global_begin, n = p.local_shape[1];
      if (c.format == QuantFormat::kQ4 && c.q4_group == 64) {
        EXPECT_THROW(stored.shard(name, p), Error) << "32 columns split a group of 64";
        continue;
      }
      const QuantizedMatrix w = stored.whole(name);
      const QuantizedMatrix s = stored.shard(name, p);
      ASSERT_EQ(s.rows, cfg.hidden_size);
      ASSERT_EQ(s.cols, n);
      const std::vector<float> all = quant::dequantize(w), part = quant::dequantize(s);
      for (int64_t r = 0; r < s.rows; ++r)
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(part[r * n + j], all[r * w.cols + first + j]) << name_of(c) << " " << r;
      if (c.format == QuantFormat::kFp6 || c.format == QuantFormat::kInt8) {
        EXPECT_EQ(s.scales, w.scales) << "the whole row's scale";
      }
    }
  }
}

TEST(QuantizedHf, TrainingFromAQuantizedDirectoryIsRefused) {
  const model::ModelConfig cfg = small_llama(false);
  const model::GPTModel source(cfg, DType::kF32, 5);
  testing::TempDir dir;
  QuantSpec spec;
  spec.format = QuantFormat::kQ8_0;
  write_quantized_hf(cfg, master_of(source), spec, dir.path());
  try {
    read_hf_weights(dir.path(), read_hf_config(dir.path()));
    FAIL() << "read for training";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantized weights are for inference"), std::string::npos)
        << e.what();
  }
  // An unquantized model has the same shapes: the block's group must suit its format.
  EXPECT_EQ(spec.group_size(), 32);
  spec.format = QuantFormat::kInt8;
  EXPECT_EQ(spec.group_size(), -1);
}

}  // namespace
}  // namespace tessera::checkpoint
