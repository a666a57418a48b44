#include "tessera/checkpoint/hf_import.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "tessera/checkpoint/hf_export.h"
#include "tessera/checkpoint/hf_rope.h"
#include "tessera/checkpoint/hf_weight_files.h"
#include "tessera/checkpoint/quantized_hf.h"
#include "tessera/checkpoint/run_state.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/model/gpt_model.h"

namespace tessera::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kModelTypes =
    "\"gpt2\" (GPT2LMHeadModel), \"llama\" (LlamaForCausalLM), \"qwen2\" (Qwen2ForCausalLM), "
    "\"mistral\" (MistralForCausalLM) or \"mixtral\" (MixtralForCausalLM)";

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// Typed access to config.json's keys; an absent or null key gives the caller's default (the
// config class's), a present one must have the right type and range. Errors name the file and
// the key.
class ConfigKeys {
 public:
  ConfigKeys(std::string path, const json& j) : path_(std::move(path)), j_(j) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  bool present(const char* key) const { return j_.contains(key); }  // null included
  const std::string& path() const { return path_; }
  const json& at(const char* key) const { return j_[key]; }

  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw Error(path_ + ": key '" + key + "': " + what);
  }

  int64_t integer(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    if (!has(key)) return fallback;
    const json& v = j_[key];
    if (!v.is_number_integer()) fail(key, "expected an integer, got " + v.dump());
    // JSON parses non-negative integers as unsigned: the lower bound applies to them too.
    const bool out_of_range =
        v.is_number_unsigned()
            ? (v.get<uint64_t>() > static_cast<uint64_t>(hi) ||
               v.get<uint64_t>() < static_cast<uint64_t>(std::max<int64_t>(lo, 0)))
            : (v.get<int64_t>() < lo || v.get<int64_t>() > hi);
    if (out_of_range)
      fail(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "], got " + v.dump());
    return v.get<int64_t>();
  }
  // A size: an integer >= 1 that fits in int.
  int size(const char* key, int64_t fallback) const {
    return static_cast<int>(integer(key, fallback, 1, INT_MAX));
  }
  // A number in the open-closed range (lo, hi] or, with lo_closed, [lo, hi).
  float number(const char* key, double fallback, double lo, double hi, bool lo_closed) const {
    if (!has(key)) return static_cast<float>(fallback);
    const json& v = j_[key];
    if (!v.is_number()) fail(key, "expected a number, got " + v.dump());
    const double x = v.get<double>();
    const bool ok = lo_closed ? (x >= lo && x < hi) : (x > lo && x <= hi);
    if (!ok)
      fail(key, "expected a number in " + std::string(lo_closed ? "[" : "(") + json(lo).dump() +
                    ", " + json(hi).dump() + std::string(lo_closed ? ")" : "]") + ", got " +
                    v.dump());
    return static_cast<float>(x);
  }
  float positive(const char* key, double fallback) const {
    return number(key, fallback, 0.0, 3.0e38, false);
  }
  float probability(const char* key, double fallback) const {
    return number(key, fallback, 0.0, 1.0, true);
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) fail(key, "expected true or false, got " + j_[key].dump());
    return j_[key].get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_string()) fail(key, "expected a string, got " + j_[key].dump());
    return j_[key].get<std::string>();
  }

 private:
  std::string path_;
  const json& j_;
};

// GPT2Config (configuration_gpt2.py) onto GPT-2 options: LayerNorm, learned positions, GELU,
// biases on every linear layer, one key/value head per query head.
model::ModelConfig gpt2_config(const ConfigKeys& k) {
  model::ModelConfig c;
  c.normalization = model::Normalization::kLayerNorm;
  c.position_embedding = model::PositionEmbedding::kLearnedAbsolute;
  c.swiglu = false;
  c.add_bias_linear = true;
  c.group_query_attention = false;
  c.num_query_groups = 0;
  c.vocab_size = k.integer("vocab_size", 50257, 2, INT_MAX);
  c.max_position_embeddings = k.size("n_positions", 1024);
  c.hidden_size = k.size("n_embd", 768);
  c.num_layers = k.size("n_layer", 12);
  c.num_attention_heads = k.size("n_head", 12);
  if (c.hidden_size % c.num_attention_heads != 0)
    k.fail("n_head", std::to_string(c.num_attention_heads) + " does not divide n_embd " +
                         std::to_string(c.hidden_size));
  c.ffn_hidden_size = k.size("n_inner", std::min<int64_t>(4LL * c.hidden_size, INT_MAX));
  // Tessera's GELU is the tanh approximation ("gelu_new" = "gelu_pytorch_tanh"); "gelu" (erf) is
  // accepted as close to it (docs/huggingface.md gives the difference).
  const std::string act = k.text("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu")
    k.fail("activation_function",
           "'" + act + "' is not supported: expected gelu_new, gelu_pytorch_tanh or gelu");
  c.hidden_dropout = k.probability("resid_pdrop", 0.1);
  c.attention_dropout = k.probability("attn_pdrop", 0.1);
  c.norm_epsilon = k.positive("layer_norm_epsilon", 1e-5);
  c.init_method_std = k.positive("initializer_range", 0.02);
  c.untie_embeddings_and_output_weights = !k.boolean("tie_word_embeddings", true);
  if (!k.boolean("scale_attn_weights", true))
    k.fail("scale_attn_weights", "false is not supported: Tessera scales scores by 1/sqrt(HD)");
  if (k.boolean("scale_attn_by_inverse_layer_idx", false))
    k.fail("scale_attn_by_inverse_layer_idx", "true is not supported");
  if (k.boolean("add_cross_attention", false))
    k.fail("add_cross_attention", "true is not supported: Tessera models are decoder-only");
  return c;
}

// The defaults of the LLaMA-shaped config classes for the keys they share (each class's
// __init__ / dataclass fields).
struct LlamaDefaults {
  int64_t vocab;
  int hidden, ffn, layers, heads;
  int kv;  // 0: = heads
  int max_positions;
  double eps, theta;
};
constexpr LlamaDefaults kLlamaDefaults{32000, 4096, 11008, 32, 32, 0, 2048, 1e-6, 10000.0};
constexpr LlamaDefaults kQwen2Defaults{151936, 4096, 22016, 32, 32, 32, 32768, 1e-6, 10000.0};
constexpr LlamaDefaults kMistralDefaults{32000, 4096, 14336, 32, 32, 8, 131072, 1e-6, 10000.0};

// The layers LlamaConfig, Qwen2Config, MistralConfig and MixtralConfig describe alike: RMSNorm,
// RoPE (plain or Llama 3.x-scaled), SwiGLU, GQA; no biases (the caller adds its family's).
model::ModelConfig llama_layers(const ConfigKeys& k, const LlamaDefaults& d) {
  model::ModelConfig c;
  c.normalization = model::Normalization::kRMSNorm;
  c.position_embedding = model::PositionEmbedding::kRope;
  c.swiglu = true;
  c.add_bias_linear = false;
  c.vocab_size = k.integer("vocab_size", d.vocab, 2, INT_MAX);
  c.hidden_size = k.size("hidden_size", d.hidden);
  c.ffn_hidden_size = k.size("intermediate_size", d.ffn);
  c.num_layers = k.size("num_hidden_layers", d.layers);
  c.num_attention_heads = k.size("num_attention_heads", d.heads);
  if (c.hidden_size % c.num_attention_heads != 0)
    k.fail("num_attention_heads", std::to_string(c.num_attention_heads) +
                                      " does not divide hidden_size " +
                                      std::to_string(c.hidden_size));
  const int kv = k.size("num_key_value_heads", d.kv > 0 ? d.kv : c.num_attention_heads);
  if (c.num_attention_heads % kv != 0)
    k.fail("num_key_value_heads", std::to_string(kv) + " does not divide num_attention_heads " +
                                      std::to_string(c.num_attention_heads));
  c.group_query_attention = kv != c.num_attention_heads;
  c.num_query_groups = kv;
  if (k.has("head_dim") && k.size("head_dim", 0) != c.head_dim())
    k.fail("head_dim", k.at("head_dim").dump() + " is not supported: Tessera's head dim is " +
                           "hidden_size / num_attention_heads = " + std::to_string(c.head_dim()));
  c.max_position_embeddings = k.size("max_position_embeddings", d.max_positions);
  c.norm_epsilon = k.positive("rms_norm_eps", d.eps);
  c.rotary_base = k.positive("rope_theta", d.theta);
  // Newer Transformers keep theta and the scaling in rope_parameters; 4.x in rope_theta and
  // rope_scaling. A scaling in either applies (rope_scaling's if both have one).
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!k.has(key)) continue;
    const HfRope rope = read_hf_rope(k.at(key), k.path(), key);
    if (rope.theta) c.rotary_base = *rope.theta;
    if (rope.scaling.llama3) c.rope_scaling = rope.scaling;
  }
  const std::string act = k.text("hidden_act", "silu");
  if (act != "silu") k.fail("hidden_act", "'" + act + "' is not supported: expected silu");
  c.attention_dropout = k.probability("attention_dropout", 0.0);
  c.hidden_dropout = 0.0f;  // these configs have no hidden dropout
  c.init_method_std = k.positive("initializer_range", 0.02);
  c.untie_embeddings_and_output_weights = !k.boolean("tie_word_embeddings", false);
  return c;
}

// A sliding_window key: null is none (full attention); absent is the class's default.
int sliding_window(const ConfigKeys& k, int fallback) {
  if (!k.present("sliding_window")) return fallback;
  return k.has("sliding_window") ? k.size("sliding_window", 0) : 0;
}

// LlamaConfig (configuration_llama.py): biases on all four attention projections with
// attention_bias and on the MLP's with mlp_bias, which Tessera's one switch needs equal.
model::ModelConfig llama_config(const ConfigKeys& k) {
  model::ModelConfig c = llama_layers(k, kLlamaDefaults);
  const bool attention_bias = k.boolean("attention_bias", false);
  if (k.boolean("mlp_bias", false) != attention_bias)
    k.fail("mlp_bias", "must equal attention_bias: Tessera has one --disable-bias-linear");
  c.add_bias_linear = attention_bias;
  return c;
}

// Qwen2Config (configuration_qwen2.py), Qwen2 and Qwen2.5: biases on q/k/v only. Its sliding
// window covers the layers from max_window_layers on (with use_sliding_window); Tessera's window
// is every layer's, so only none or all of them may slide.
model::ModelConfig qwen2_config(const ConfigKeys& k) {
  model::ModelConfig c = llama_layers(k, kQwen2Defaults);
  c.add_qkv_bias = true;
  const int window = k.boolean("use_sliding_window", false) ? sliding_window(k, 4096) : 0;
  if (k.has("layer_types")) {  // newer Transformers: one entry per layer, which rules
    const json& types = k.at("layer_types");
    int sliding = 0;
    if (!types.is_array() || static_cast<int>(types.size()) != c.num_layers)
      k.fail("layer_types", "expected a list of num_hidden_layers entries, got " + types.dump());
    for (const json& t : types) {
      if (t != "full_attention" && t != "sliding_attention")
        k.fail("layer_types",
               "expected \"full_attention\" or \"sliding_attention\", got " + t.dump());
      sliding += t == "sliding_attention";
    }
    if (sliding != 0 && sliding != c.num_layers)
      k.fail("layer_types",
             "sliding windows on some layers only are not supported: Tessera's "
             "window is every layer's");
    c.sliding_window = sliding > 0 ? window : 0;
    return c;
  }
  const int first_sliding = static_cast<int>(k.integer("max_window_layers", 28, 0, INT_MAX));
  if (window > 0 && first_sliding > 0 && first_sliding < c.num_layers)
    k.fail("max_window_layers",
           std::to_string(first_sliding) +
               " (with use_sliding_window): sliding windows on "
               "layers from it on only are not supported: expected 0 (every layer) or >= "
               "num_hidden_layers (none)");
  c.sliding_window = first_sliding == 0 ? window : 0;
  return c;
}

// MistralConfig (configuration_mistral.py): LLaMA's layers without biases, a sliding window
// (default 4096; null for none) on every layer. Its layer_types key, if any, is not read, as
// MistralModel does not read it.
model::ModelConfig mistral_config(const ConfigKeys& k) {
  model::ModelConfig c = llama_layers(k, kMistralDefaults);
  c.sliding_window = sliding_window(k, 4096);
  return c;
}

// MixtralConfig (configuration_mixtral.py): LLaMA layers whose MLP is num_local_experts SwiGLU
// experts of intermediate_size, top num_experts_per_tok softmax routing. Keys Tessera does not
// know are refused, since a Mixtral variant's extra key may change the math (sliding windows,
// router noise); the harmless ones are listed, and Tessera's own "quantization" block, which
// read_quant_spec reads (quantized_hf.h).
model::ModelConfig mixtral_config(const ConfigKeys& k, const json& j) {
  static const std::set<std::string> known = {
      "architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
      "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
      "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
      "hidden_act", "attention_dropout", "initializer_range", "tie_word_embeddings",
      "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "output_router_logits",
      "router_jitter_noise", "sliding_window", "torch_dtype", "dtype", "transformers_version",
      "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "quantization"};
  for (const auto& [key, value] : j.items())
    if (!known.count(key))
      k.fail(key.c_str(),
             "unknown MixtralConfig key: it may change the model's math, so it is "
             "refused (remove it if it does not)");
  if (k.number("router_jitter_noise", 0.0, 0.0, 1.0, true) != 0.0f)
    k.fail("router_jitter_noise", "router noise is not supported: expected 0");
  model::ModelConfig c = llama_layers(k, kLlamaDefaults);
  c.sliding_window = sliding_window(k, 0);  // MixtralConfig's default: none
  c.moe.num_experts = k.size("num_local_experts", 8);
  c.moe.topk = k.size("num_experts_per_tok", 2);
  if (c.moe.topk > c.moe.num_experts)
    k.fail("num_experts_per_tok", std::to_string(c.moe.topk) + " exceeds num_local_experts " +
                                      std::to_string(c.moe.num_experts));
  c.moe.aux_loss_coeff = k.number("router_aux_loss_coef", 0.001, 0.0, 3.0e38, true);
  return c;
}

// ---- weights ---------------------------------------------------------------------------------

// The names under which parameter `name` may be stored: itself, then without the base model's
// prefix (GPT2Model / LlamaModel save their tensors without it).
std::vector<std::string> stored_names(const model::ModelConfig& cfg, const std::string& name) {
  const std::string prefix = cfg.family() == model::Family::kGpt2 ? "transformer." : "model.";
  if (name.compare(0, prefix.size(), prefix) == 0) return {name, name.substr(prefix.size())};
  return {name};
}

// Stored tensors that are not parameters and are dropped on purpose: GPT-2's causal-mask
// buffers, LLaMA's RoPE frequencies, and the output layer of a tied model (it is the embedding).
bool ignored(const model::ModelConfig& cfg, const std::string& name) {
  if (cfg.family() == model::Family::kGpt2)
    return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
           (name == "lm_head.weight" && !cfg.untie_embeddings_and_output_weights);
  return name.ends_with(".rotary_emb.inv_freq") ||
         (name == "lm_head.weight" && !cfg.untie_embeddings_and_output_weights);
}

// Widens n stored elements to fp32. `src` may be unaligned (safetensors does not promise
// alignment across writers), so 16-bit values are copied to an aligned block first.
void widen(float* dst, const unsigned char* src, SafeDType dtype, int64_t n) {
  if (dtype == SafeDType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  constexpr int64_t kBlock = 4096;
  alignas(64) uint16_t block[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    std::memcpy(block, src + 2 * i, static_cast<size_t>(m) * 2);
    if (dtype == SafeDType::kBF16)
      convert(dst + i, reinterpret_cast<const bf16*>(block), m);
    else
      convert(dst + i, reinterpret_cast<const fp16*>(block), m);
  }
}

// Reads parameter p from `file` (stored as `stored`) into a new fp32 tensor, Tessera's layout.
Tensor read_parameter(const model::ModelConfig& cfg, const model::Parameter& p,
                      const SafetensorsFile& file, const std::string& stored) {
  const std::string where = file.path() + ": tensor '" + stored + "'";
  const SafeTensorInfo& info = file.info(stored);
  if (info.dtype != SafeDType::kF32 && info.dtype != SafeDType::kBF16 &&
      info.dtype != SafeDType::kF16)
    throw Error(where + ": dtype " + safe_dtype_name(info.dtype) +
                " is not supported: expected F32, BF16 or F16");
  const std::vector<int64_t> expected = hf_tensor_shape(cfg, p);
  if (info.shape != expected)
    throw Error(where + " has shape " + shape_str(info.shape) + ", expected " +
                shape_str(expected) + " (config.json's model)");
  const auto* src = static_cast<const unsigned char*>(file.data(stored));
  const bool conv1d = is_hf_conv1d(cfg, p.name) && expected.size() == 2;
  Tensor stored_layout = Tensor::empty(expected, DType::kF32, MemoryCategory::kOther);
  widen(stored_layout.data<float>(), src, info.dtype, info.numel);
  return conv1d ? transposed(stored_layout) : stored_layout;  // Conv1D: [in, out] -> (out, in)
}

}  // namespace

bool is_hf_directory(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  return fs::is_regular_file(d / kConfigFile, ec) &&
         (fs::is_regular_file(d / kHfWeightsFile, ec) || fs::is_regular_file(d / kHfIndexFile, ec));
}

model::ModelConfig read_hf_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / kConfigFile).string();
  json j;
  try {
    j = json::parse(read_file(path, "Hugging Face config"));
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + one_line(e.what()));
  }
  if (!j.is_object()) throw Error(path + ": expected a JSON object");
  const ConfigKeys k(path, j);
  if (!k.has("model_type")) k.fail("model_type", std::string("missing: expected ") + kModelTypes);
  const std::string type = k.text("model_type", "");
  model::ModelConfig cfg;
  if (type == "gpt2")
    cfg = gpt2_config(k);
  else if (type == "llama")
    cfg = llama_config(k);
  else if (type == "qwen2")
    cfg = qwen2_config(k);
  else if (type == "mistral")
    cfg = mistral_config(k);
  else if (type == "mixtral")
    cfg = mixtral_config(k, j);
  else if (type == "tessera" && k.has("tessera_model"))  // hf_export.h: Tessera's own layout
    cfg = model_config_from_json(k.at("tessera_model"), path + ": tessera_model");
  else
    k.fail("model_type", "'" + type + "' is not supported: expected " + kModelTypes);
  // The HF config has no training sequence length; the model's context is the natural one.
  cfg.seq_length = cfg.max_position_embeddings;
  try {
    cfg.validate();
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return cfg;
}

std::map<std::string, Tensor> read_hf_weights(const std::string& dir, const model::ModelConfig& cfg,
                                              const std::set<std::string>* quantized) {
  if (!quantized) {
    if (const std::optional<QuantSpec> spec = read_quant_spec(dir))
      throw Error(dir + ": quantized to " + quant::quant_format_name(spec->format) +
                  " (config.json's \"quantization\"): quantized weights are for inference " +
                  "(tessera-generate, tessera-serve); training and conversion need the " +
                  "unquantized directory");
  }
  const auto skipped = [&](const std::string& name) {
    if (!quantized) return false;
    for (const char* tail : {"", ".scale", ".min"}) {
      const size_t n = std::char_traits<char>::length(tail);
      if (name.size() > n && name.compare(name.size() - n, n, tail) == 0 &&
          quantized->count(name.substr(0, name.size() - n)))
        return true;
    }
    return false;
  };
  HfWeightFiles source(dir);
  std::set<std::string> unused;
  for (const auto& [name, file] : source.file_of()) unused.insert(name);
  std::map<std::string, Tensor> out;
  const model::ParameterSet params = model::GPTModel::declare_part(cfg, 1, 0, {});
  for (const model::Parameter& p : params.all()) {
    if (p.tied_copy || (quantized && quantized->count(p.name))) continue;
    const std::vector<std::string> names = stored_names(cfg, p.name);
    const auto found = std::find_if(names.begin(), names.end(), [&](const std::string& n) {
      return source.file_of().count(n) > 0;
    });
    if (found == names.end()) {
      std::string alt;
      for (size_t i = 1; i < names.size(); ++i) alt += " or " + quoted(names[i]);
      throw Error(source.listing() + ": missing tensor " + quoted(p.name) + alt +
                  ": config.json's model has it, shape " + shape_str(hf_tensor_shape(cfg, p)));
    }
    out[p.name] = read_parameter(cfg, p, source.file(*found), *found);
    unused.erase(*found);
  }
  for (const std::string& name : unused) {
    if (ignored(cfg, name) || skipped(name)) continue;
    throw Error(source.file_of().at(name) + ": tensor " + quoted(name) +
                " is not a parameter of config.json's model (config and weights disagree)");
  }
  return out;
}

}  // namespace tessera::checkpoint
