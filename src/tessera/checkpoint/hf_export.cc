#include "tessera/checkpoint/hf_export.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"

namespace tessera::checkpoint {
namespace {

bool is_conv1d(const model::ModelConfig& cfg, const std::string& name) {
  if (cfg.family() != model::Family::kGpt2) return false;
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with("c_attn.weight") || ends_with("c_proj.weight") || ends_with("c_fc.weight");
}

}  // namespace

void check_hf_exportable(const model::ModelConfig& cfg) {
  const auto refuse = [](const std::string& flag, const std::string& why) {
    throw Error("--export-weights: " + flag + ": " + why);
  };
  if (cfg.family() == model::Family::kGpt2) {
    if (cfg.group_query_attention && cfg.kv_heads() != cfg.num_attention_heads)
      refuse("--group-query-attention", "GPT-2 (GPT2LMHeadModel) has no grouped-query attention");
    return;
  }
  // LLaMA naming was chosen because one LLaMA feature is on; LlamaForCausalLM needs all three.
  if (cfg.normalization != model::Normalization::kRMSNorm)
    refuse("--normalization", "a LLaMA-family model (RoPE/SwiGLU) must use RMSNorm to be loadable by LlamaForCausalLM");
  if (cfg.position_embedding != model::PositionEmbedding::kRope)
    refuse("--position-embedding-type", "a LLaMA-family model (RMSNorm/SwiGLU) must use rope to be loadable by LlamaForCausalLM");
  if (!cfg.swiglu)
    refuse("--swiglu", "a LLaMA-family model (RMSNorm/RoPE) must use SwiGLU to be loadable by LlamaForCausalLM");
  // Biases map onto LlamaConfig's attention_bias (q/k/v/o) and mlp_bias (gate/up/down).
}

std::string hf_config_json(const model::ModelConfig& cfg) {
  nlohmann::ordered_json j;
  if (cfg.family() == model::Family::kGpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = cfg.vocab_size;
    j["n_positions"] = cfg.max_positions();
    j["n_embd"] = cfg.hidden_size;
    j["n_layer"] = cfg.num_layers;
    j["n_head"] = cfg.num_attention_heads;
    j["n_inner"] = cfg.ffn();
    j["activation_function"] = "gelu_new";
    j["resid_pdrop"] = cfg.hidden_dropout;
    j["embd_pdrop"] = cfg.hidden_dropout;
    j["attn_pdrop"] = cfg.attention_dropout;
    j["layer_norm_epsilon"] = cfg.norm_epsilon;
    j["initializer_range"] = cfg.init_method_std;
    j["tie_word_embeddings"] = !cfg.untie_embeddings_and_output_weights;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["vocab_size"] = cfg.vocab_size;
    j["hidden_size"] = cfg.hidden_size;
    j["intermediate_size"] = cfg.ffn();
    j["num_hidden_layers"] = cfg.num_layers;
    j["num_attention_heads"] = cfg.num_attention_heads;
    j["num_key_value_heads"] = cfg.kv_heads();
    j["head_dim"] = cfg.head_dim();
    j["max_position_embeddings"] = cfg.max_positions();
    j["rms_norm_eps"] = cfg.norm_epsilon;
    j["rope_theta"] = cfg.rotary_base;
    j["hidden_act"] = "silu";
    j["attention_bias"] = cfg.add_bias_linear;
    j["mlp_bias"] = cfg.add_bias_linear;
    j["attention_dropout"] = cfg.attention_dropout;
    j["initializer_range"] = cfg.init_method_std;
    j["tie_word_embeddings"] = !cfg.untie_embeddings_and_output_weights;
  }
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

void export_hf(const model::ModelConfig& cfg, const model::ParameterSet& params,
               const std::function<Tensor(const model::Parameter&)>& master,
               const std::string& weights_path) {
  check_hf_exportable(cfg);
  std::vector<Tensor> keep;  // owns converted copies until the file is written
  std::vector<SafeTensorView> views;
  for (const model::Parameter& p : params.all()) {
    Tensor value = master(p);
    TESSERA_CHECK(value.dtype() == DType::kF32 && value.numel() == p.global_numel());
    Shape shape = p.global_shape;
    if (p.shard.vocab_rows > 0) {  // strip padded vocabulary rows
      value = value.slice_rows(0, p.shard.vocab_rows);
      shape[0] = p.shard.vocab_rows;
    }
    if (is_conv1d(cfg, p.name) && shape.size() == 2) {
      Tensor t = Tensor::empty({shape[1], shape[0]}, DType::kF32, MemoryCategory::kOther);
      const float* src = value.data<float>();
      float* dst = t.data<float>();
      for (int64_t r = 0; r < shape[0]; ++r)
        for (int64_t c = 0; c < shape[1]; ++c) dst[c * shape[0] + r] = src[r * shape[1] + c];
      value = t;
      shape = {shape[1], shape[0]};
    }
    keep.push_back(value);
    views.push_back({p.name, SafeDType::kF32, shape, keep.back().raw()});
  }
  write_safetensors(weights_path, views, {{"format", "pt"}});
  const auto dir = std::filesystem::path(weights_path).parent_path();
  const auto config_path = (dir.empty() ? std::filesystem::path(".") : dir) / "config.json";
  std::ofstream out(config_path);
  out << hf_config_json(cfg);
  if (!out) throw Error(config_path.string() + ": cannot write config.json");
}

}  // namespace tessera::checkpoint
