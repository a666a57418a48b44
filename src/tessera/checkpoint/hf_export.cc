#include "tessera/checkpoint/hf_export.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "tessera/checkpoint/hf_rope.h"
#include "tessera/checkpoint/hf_weight_files.h"
#include "tessera/checkpoint/run_state.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::checkpoint {
namespace {

namespace fs = std::filesystem;

double decimal(float f) { return shortest_decimal(f); }  // hf_rope.h

}  // namespace

std::string mixtral_mismatch(const model::ModelConfig& cfg) {
  if (!cfg.moe.enabled()) return "not an MoE model";
  if (cfg.family() != model::Family::kLlama) return "GPT-2 layers (Mixtral's are LLaMA's)";
  const std::vector<bool> moe_layer = cfg.moe_layer_mask();
  if (std::find(moe_layer.begin(), moe_layer.end(), false) != moe_layer.end())
    return "--moe-layer-freq: Mixtral's every layer is MoE";
  if (cfg.moe.score != moe::ScoreFunction::kSoftmax || cfg.moe.pre_softmax)
    return "--moe-router-score-function: Mixtral takes a softmax over the top k";
  if (cfg.moe.topk_scaling != 1.0f) return "--moe-router-topk-scaling-factor: Mixtral's is 1";
  if (cfg.moe.shared_expert_size > 0)
    return "--moe-shared-expert-intermediate-size: Mixtral has none";
  if (cfg.moe.expert_bias) return "--moe-router-enable-expert-bias: Mixtral has none";
  if (cfg.moe_ffn() != cfg.ffn())
    return "--moe-ffn-hidden-size: Mixtral's experts are intermediate_size wide";
  if (cfg.qkv_bias()) return "linear biases: Mixtral has none";
  return "";
}

void check_hf_exportable(const model::ModelConfig& cfg) {
  // An MoE model Transformers has no class for is exported in Tessera's own layout (below).
  if (cfg.moe.enabled() && !mixtral_mismatch(cfg).empty()) return;
  const auto refuse = [](const std::string& flag, const std::string& why) {
    throw Error("--export-weights: " + flag + ": " + why);
  };
  if (cfg.family() == model::Family::kGpt2) {
    if (cfg.group_query_attention && cfg.kv_heads() != cfg.num_attention_heads)
      refuse("--group-query-attention", "GPT-2 (GPT2LMHeadModel) has no grouped-query attention");
    if (cfg.add_qkv_bias && !cfg.add_bias_linear)
      refuse("--add-qkv-bias", "GPT-2 (GPT2LMHeadModel) has biases on every linear layer");
    if (cfg.sliding_window > 0)
      refuse("sliding_window", "GPT-2 (GPT2LMHeadModel) has no sliding-window attention");
    return;
  }
  // A window goes to MistralForCausalLM (no biases at all) or Qwen2ForCausalLM (q/k/v biases).
  if (cfg.sliding_window > 0 && cfg.add_bias_linear && !cfg.moe.enabled())
    refuse("sliding_window",
           "with linear biases: MistralForCausalLM has none and "
           "Qwen2ForCausalLM only q/k/v biases (--add-qkv-bias)");
  // LLaMA naming was chosen because one LLaMA feature is on; LlamaForCausalLM needs all three.
  if (cfg.normalization != model::Normalization::kRMSNorm)
    refuse("--normalization", "a LLaMA-family model (RoPE/SwiGLU) must use RMSNorm to be loadable by LlamaForCausalLM");
  if (cfg.position_embedding != model::PositionEmbedding::kRope)
    refuse("--position-embedding-type", "a LLaMA-family model (RMSNorm/SwiGLU) must use rope to be loadable by LlamaForCausalLM");
  if (!cfg.swiglu)
    refuse("--swiglu", "a LLaMA-family model (RMSNorm/RoPE) must use SwiGLU to be loadable by LlamaForCausalLM");
  // Biases map onto LlamaConfig's attention_bias (q/k/v/o) and mlp_bias (gate/up/down).
}

std::string hf_model_type(const model::ModelConfig& cfg) {
  if (cfg.moe.enabled() && !mixtral_mismatch(cfg).empty()) return "tessera";
  if (cfg.family() == model::Family::kGpt2) return "gpt2";
  if (cfg.moe.enabled()) return "mixtral";
  if (cfg.add_qkv_bias && !cfg.add_bias_linear) return "qwen2";
  if (cfg.sliding_window > 0) return "mistral";
  return "llama";
}

bool is_hf_conv1d(const model::ModelConfig& cfg, const std::string& name) {
  if (cfg.family() != model::Family::kGpt2) return false;
  return name.ends_with("c_attn.weight") || name.ends_with("c_proj.weight") ||
         name.ends_with("c_fc.weight");
}

std::vector<int64_t> hf_tensor_shape(const model::ModelConfig& cfg, const model::Parameter& p) {
  std::vector<int64_t> shape = p.global_shape;
  if (p.shard.vocab_rows > 0) shape[0] = p.shard.vocab_rows;
  if (is_hf_conv1d(cfg, p.name) && shape.size() == 2) std::swap(shape[0], shape[1]);
  return shape;
}

std::string hf_config_json(const model::ModelConfig& cfg) {
  nlohmann::ordered_json j;
  if (cfg.moe.enabled() && !mixtral_mismatch(cfg).empty()) {
    // Safetensors weights under Tessera's names, and the whole model config (run_state.h's
    // form): Tessera reads it back; Transformers has no class for it.
    j["architectures"] = {"TesseraForCausalLM"};
    j["model_type"] = "tessera";
    j["tessera_note"] = "not loadable by Transformers: " + mixtral_mismatch(cfg);
    j["tessera_model"] = model_config_to_json(cfg);
    j["torch_dtype"] = "float32";
    return j.dump(2) + "\n";
  }
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
    j["resid_pdrop"] = decimal(cfg.hidden_dropout);
    j["embd_pdrop"] = decimal(cfg.hidden_dropout);
    j["attn_pdrop"] = decimal(cfg.attention_dropout);
    j["layer_norm_epsilon"] = decimal(cfg.norm_epsilon);
    j["initializer_range"] = decimal(cfg.init_method_std);
    j["tie_word_embeddings"] = !cfg.untie_embeddings_and_output_weights;
  } else {
    const std::string type = hf_model_type(cfg);
    const bool mixtral = type == "mixtral", qwen2 = type == "qwen2", mistral = type == "mistral";
    j["architectures"] = {mixtral   ? "MixtralForCausalLM"
                          : qwen2   ? "Qwen2ForCausalLM"
                          : mistral ? "MistralForCausalLM"
                                    : "LlamaForCausalLM"};
    j["model_type"] = type;
    j["vocab_size"] = cfg.vocab_size;
    j["hidden_size"] = cfg.hidden_size;
    j["intermediate_size"] = cfg.ffn();
    j["num_hidden_layers"] = cfg.num_layers;
    j["num_attention_heads"] = cfg.num_attention_heads;
    j["num_key_value_heads"] = cfg.kv_heads();
    j["head_dim"] = cfg.head_dim();
    j["max_position_embeddings"] = cfg.max_positions();
    j["rms_norm_eps"] = decimal(cfg.norm_epsilon);
    j["rope_theta"] = decimal(cfg.rotary_base);
    if (cfg.rope_scaling.llama3) j["rope_scaling"] = hf_rope_scaling_json(cfg.rope_scaling);
    j["hidden_act"] = "silu";
    const nlohmann::json window =
        cfg.sliding_window > 0 ? nlohmann::json(cfg.sliding_window) : nlohmann::json(nullptr);
    if (mixtral) {  // MixtralConfig: no biases; routing keys, dropless top-k softmax
      j["num_local_experts"] = cfg.moe.num_experts;
      j["num_experts_per_tok"] = cfg.moe.topk;
      j["router_aux_loss_coef"] = decimal(cfg.moe.aux_loss_coeff);
      j["output_router_logits"] = false;
      j["router_jitter_noise"] = 0.0;
      j["sliding_window"] = window;
    } else if (qwen2) {  // Qwen2Config: q/k/v biases are implied; every layer or none slides
      j["use_sliding_window"] = cfg.sliding_window > 0;
      j["sliding_window"] = window;
      j["max_window_layers"] = cfg.sliding_window > 0 ? 0 : cfg.num_layers;
    } else if (mistral) {  // MistralConfig: no biases
      j["sliding_window"] = window;
    } else {
      j["attention_bias"] = cfg.add_bias_linear;
      j["mlp_bias"] = cfg.add_bias_linear;
    }
    j["attention_dropout"] = decimal(cfg.attention_dropout);
    j["initializer_range"] = decimal(cfg.init_method_std);
    j["tie_word_embeddings"] = !cfg.untie_embeddings_and_output_weights;
  }
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

void export_hf(const model::ModelConfig& cfg, const model::ParameterSet& params,
               const std::function<Tensor(const model::Parameter&)>& master,
               const std::string& weights_path, int64_t max_shard_bytes) {
  check_hf_exportable(cfg);
  std::vector<HfWeightEntry> entries;
  for (const model::Parameter& p : params.all())
    if (!p.tied_copy) entries.push_back(hf_f32_entry(cfg, p, master));  // the original is exported
  write_hf_weight_files(weights_path, entries, max_shard_bytes, {{"format", "pt"}});
  const fs::path path(weights_path);
  write_file_atomically(
      ((path.has_parent_path() ? path.parent_path() : fs::path(".")) / "config.json").string(),
      hf_config_json(cfg));
}

HfWeightEntry hf_f32_entry(const model::ModelConfig& cfg, const model::Parameter& p,
                           const std::function<Tensor(const model::Parameter&)>& master) {
  std::vector<int64_t> shape = hf_tensor_shape(cfg, p);
  return {p.name, SafeDType::kF32, shape,
          [&cfg, &p, &master, shape](std::vector<Tensor>& hold) {
            Tensor value = master(p);
            TESSERA_CHECK(value.dtype() == DType::kF32 && value.numel() == p.global_numel());
            if (p.shard.vocab_rows > 0) value = value.slice_rows(0, p.shard.vocab_rows);
            if (is_hf_conv1d(cfg, p.name) && shape.size() == 2)
              value = transposed(value.view({shape[1], shape[0]}));  // (out, in) -> [in, out]
            hold.push_back(value);
            return hold.back().raw();
          }};
}

Tensor transposed(const Tensor& m) {
  TESSERA_CHECK(m.dtype() == DType::kF32 && m.shape().size() == 2);
  const int64_t rows = m.shape()[0], cols = m.shape()[1];
  Tensor t = Tensor::empty({cols, rows}, DType::kF32, MemoryCategory::kOther);
  const float* src = m.data<float>();
  float* dst = t.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  return t;
}

}  // namespace tessera::checkpoint
