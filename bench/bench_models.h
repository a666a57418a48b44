// Shapes and micro-batches shared by the model benchmarks (model_step, tp_step).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tessera/model/config.h"
#include "tessera/model/gpt_model.h"

namespace tessera::bench {

// GPT-2 124M at sequence length 256, dropout off (dropout is not part of the FLOPs count).
inline model::ModelConfig gpt2_124m() {
  model::ModelConfig c = model::preset("gpt2-124m");
  c.seq_length = 256;
  c.attention_dropout = c.hidden_dropout = 0.0f;
  return c;
}

// A LLaMA-architecture model of GPT-2-small size: 12 layers, hidden 768, GQA 12/4, SwiGLU
// 2048, vocab 32000, untied output layer.
inline model::ModelConfig llama_124m() {
  model::ModelConfig c = model::preset("llama-tiny");
  c.num_layers = 12;
  c.hidden_size = 768;
  c.num_attention_heads = 12;
  c.group_query_attention = true;
  c.num_query_groups = 4;
  c.ffn_hidden_size = 2048;
  c.seq_length = 256;
  c.max_position_embeddings = 256;
  c.vocab_size = 32000;
  return c;
}

// TinyLlama-1.1B's shape (the llama-1b preset) at a context of 1024: the inference benchmarks'
// ~1 B LLaMA-style model.
inline model::ModelConfig llama_1b() {
  model::ModelConfig c = model::preset("llama-1b");
  c.seq_length = 1024;
  c.max_position_embeddings = 1024;
  return c;
}

// The inference benchmarks' models by --model (gpt2, llama1b or all).
struct NamedModel {
  const char* name;
  model::ModelConfig cfg;
};
inline std::vector<NamedModel> decode_models(const std::string& which) {
  std::vector<NamedModel> models;
  if (which == "gpt2" || which == "all") models.push_back({"gpt2-124m", gpt2_124m()});
  if (which == "llama1b" || which == "all") models.push_back({"llama-1b", llama_1b()});
  return models;
}

// The flags the inference benchmarks share: --model, --dtype, --threads, --prompt, --decode.
struct DecodeBenchFlags {
  std::string model = "all", dtype;
  int threads = 2;
  int64_t prompt = 128, decode = 32;
  // Takes flag f with value v when it is one of these; false otherwise.
  bool take(const std::string& f, const std::string& v) {
    if (f == "--model")
      model = v;
    else if (f == "--dtype")
      dtype = v;
    else if (f == "--threads")
      threads = std::stoi(v);
    else if (f == "--prompt")
      prompt = std::stoll(v);
    else if (f == "--decode")
      decode = std::stoll(v);
    else
      return false;
    return true;
  }
};

// A fixed micro-batch of B sequences for cfg.
struct BenchBatch {
  std::vector<int32_t> tokens, targets;
  model::Batch batch;
  BenchBatch(const model::ModelConfig& cfg, int64_t B) {
    const int64_t T = cfg.seq_length;
    tokens.resize(B * T);
    targets.resize(B * T);
    for (int64_t i = 0; i < B * T; ++i) {
      tokens[i] = static_cast<int32_t>((i * 7919) % cfg.vocab_size);
      targets[i] = static_cast<int32_t>((i * 104729 + 1) % cfg.vocab_size);
    }
    batch = {tokens.data(), targets.data(), nullptr, B, T};
  }
};

// Runs step(s) for s = 0..steps (step 0 warms caches and the allocator and is not timed);
// returns the median time of the others in seconds.
inline double median_step_seconds(int steps, const std::function<void(int)>& step) {
  std::vector<double> times;
  for (int s = 0; s <= steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    step(s);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The same for several variants at once, their steps interleaved (variant 0 step s, variant 1
// step s, ...), so a slow phase of a shared machine hits every variant alike and the ratios
// between them stay meaningful. Returns each variant's median in seconds.
inline std::vector<double> interleaved_median_step_seconds(
    int steps, const std::vector<std::function<void(int)>>& variants) {
  std::vector<std::vector<double>> times(variants.size());
  for (int s = 0; s <= steps; ++s) {
    for (size_t v = 0; v < variants.size(); ++v) {
      const auto t0 = std::chrono::steady_clock::now();
      variants[v](s);
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s > 0) times[v].push_back(dt);
    }
  }
  std::vector<double> medians;
  for (auto& t : times) {
    std::sort(t.begin(), t.end());
    medians.push_back(t[t.size() / 2]);
  }
  return medians;
}

}  // namespace tessera::bench
