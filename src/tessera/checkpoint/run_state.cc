#include "tessera/checkpoint/run_state.h"

#include <map>

#include "tessera/core/error.h"

namespace tessera::checkpoint {
namespace {

// Reads j[key] into `field`, naming the key when it is missing or has the wrong type.
template <typename T>
void get(const nlohmann::json& j, const char* key, T& field, const std::string& where) {
  try {
    field = j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(where + ": '" + key + "' is missing or has the wrong type");
  }
}

// The name of `value` in `names` (model/config.h's tables).
template <typename E>
std::string name_of(const std::map<std::string, E>& names, E value) {
  for (const auto& [text, v] : names)
    if (v == value) return text;
  return "?";
}

// Reads j[key], one of `names`; tessera::Error naming the key and the names otherwise.
template <typename E>
E named(const nlohmann::json& j, const char* key, const std::map<std::string, E>& names,
        const std::string& where) {
  std::string text;
  get(j, key, text, where);
  const auto it = names.find(text);
  if (it != names.end()) return it->second;
  std::string expected;
  for (const auto& [name, value] : names) expected += (expected.empty() ? "" : " or ") + name;
  throw Error(where + ": moe." + key + " '" + text + "': expected " + expected);
}

nlohmann::json moe_to_json(const model::MoeConfig& m) {
  return {{"num_experts", m.num_experts},
          {"layer_freq", m.layer_freq},
          {"ffn_hidden_size", m.ffn_hidden_size},
          {"shared_expert_intermediate_size", m.shared_expert_size},
          {"router_dtype", name_of(model::moe_router_dtype_names(), m.router_fp64)},
          {"score_function", name_of(model::moe_score_function_names(), m.score)},
          {"pre_softmax", m.pre_softmax},
          {"topk", m.topk},
          {"topk_scaling_factor", m.topk_scaling},
          {"load_balancing_type", name_of(model::moe_load_balancing_names(), m.load_balancing)},
          {"aux_loss_coeff", m.aux_loss_coeff},
          {"z_loss_coeff", m.z_loss_coeff},
          {"enable_expert_bias", m.expert_bias},
          {"bias_update_rate", m.bias_update_rate},
          {"expert_capacity_factor", m.capacity_factor},
          {"token_drop_policy", name_of(model::moe_drop_policy_names(), m.drop_policy)},
          {"pad_expert_input_to_capacity", m.pad_to_capacity},
          {"token_dispatcher_type", name_of(model::moe_dispatcher_names(), m.dispatcher)}};
}

model::MoeConfig moe_from_json(const nlohmann::json& j, const std::string& where) {
  model::MoeConfig m;
  get(j, "num_experts", m.num_experts, where);
  get(j, "layer_freq", m.layer_freq, where);
  get(j, "ffn_hidden_size", m.ffn_hidden_size, where);
  get(j, "shared_expert_intermediate_size", m.shared_expert_size, where);
  m.router_fp64 = named(j, "router_dtype", model::moe_router_dtype_names(), where);
  m.score = named(j, "score_function", model::moe_score_function_names(), where);
  get(j, "pre_softmax", m.pre_softmax, where);
  get(j, "topk", m.topk, where);
  get(j, "topk_scaling_factor", m.topk_scaling, where);
  m.load_balancing = named(j, "load_balancing_type", model::moe_load_balancing_names(), where);
  get(j, "aux_loss_coeff", m.aux_loss_coeff, where);
  get(j, "z_loss_coeff", m.z_loss_coeff, where);
  get(j, "enable_expert_bias", m.expert_bias, where);
  get(j, "bias_update_rate", m.bias_update_rate, where);
  get(j, "expert_capacity_factor", m.capacity_factor, where);
  m.drop_policy = named(j, "token_drop_policy", model::moe_drop_policy_names(), where);
  get(j, "pad_expert_input_to_capacity", m.pad_to_capacity, where);
  // A layout choice, absent in the first MoE run states: alltoall then.
  if (j.contains("token_dispatcher_type"))
    m.dispatcher = named(j, "token_dispatcher_type", model::moe_dispatcher_names(), where);
  return m;
}

// Llama 3.x's RoPE rescaling: null when off, else its four settings.
nlohmann::json rope_scaling_to_json(const kernels::RopeScaling& r) {
  if (!r.llama3) return nullptr;
  return {{"rope_type", "llama3"},
          {"factor", r.factor},
          {"low_freq_factor", r.low_freq_factor},
          {"high_freq_factor", r.high_freq_factor},
          {"original_max_position_embeddings", r.original_max_position_embeddings}};
}

kernels::RopeScaling rope_scaling_from_json(const nlohmann::json& j, const std::string& where) {
  kernels::RopeScaling r;
  if (j.is_null()) return r;
  std::string type;
  get(j, "rope_type", type, where);
  if (type != "llama3") throw Error(where + ": rope_scaling type '" + type + "': expected llama3");
  r.llama3 = true;
  get(j, "factor", r.factor, where);
  get(j, "low_freq_factor", r.low_freq_factor, where);
  get(j, "high_freq_factor", r.high_freq_factor, where);
  get(j, "original_max_position_embeddings", r.original_max_position_embeddings, where);
  return r;
}

}  // namespace

nlohmann::json model_config_to_json(const model::ModelConfig& c) {
  return {{"num_layers", c.num_layers},
          {"hidden_size", c.hidden_size},
          {"num_attention_heads", c.num_attention_heads},
          {"ffn_hidden_size", c.ffn_hidden_size},
          {"seq_length", c.seq_length},
          {"max_position_embeddings", c.max_position_embeddings},
          {"vocab_size", c.vocab_size},
          {"make_vocab_size_divisible_by", c.make_vocab_size_divisible_by},
          {"normalization",
           c.normalization == model::Normalization::kRMSNorm ? "RMSNorm" : "LayerNorm"},
          {"norm_epsilon", c.norm_epsilon},
          {"swiglu", c.swiglu},
          {"position_embedding_type",
           c.position_embedding == model::PositionEmbedding::kRope ? "rope" : "learned_absolute"},
          {"rotary_base", c.rotary_base},
          {"group_query_attention", c.group_query_attention},
          {"num_query_groups", c.num_query_groups},
          {"untie_embeddings_and_output_weights", c.untie_embeddings_and_output_weights},
          {"add_bias_linear", c.add_bias_linear},
          {"add_qkv_bias", c.add_qkv_bias},
          {"sliding_window", c.sliding_window},
          {"rope_scaling", rope_scaling_to_json(c.rope_scaling)},
          {"attention_dropout", c.attention_dropout},
          {"hidden_dropout", c.hidden_dropout},
          {"init_method_std", c.init_method_std},
          {"moe", moe_to_json(c.moe)}};
}

model::ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& where) {
  model::ModelConfig c;
  get(j, "num_layers", c.num_layers, where);
  get(j, "hidden_size", c.hidden_size, where);
  get(j, "num_attention_heads", c.num_attention_heads, where);
  get(j, "ffn_hidden_size", c.ffn_hidden_size, where);
  get(j, "seq_length", c.seq_length, where);
  get(j, "max_position_embeddings", c.max_position_embeddings, where);
  get(j, "vocab_size", c.vocab_size, where);
  get(j, "make_vocab_size_divisible_by", c.make_vocab_size_divisible_by, where);
  std::string norm, position;
  get(j, "normalization", norm, where);
  get(j, "position_embedding_type", position, where);
  if (norm != "RMSNorm" && norm != "LayerNorm")
    throw Error(where + ": normalization '" + norm + "': expected RMSNorm or LayerNorm");
  if (position != "rope" && position != "learned_absolute")
    throw Error(where + ": position_embedding_type '" + position +
                "': expected rope or learned_absolute");
  c.normalization =
      norm == "RMSNorm" ? model::Normalization::kRMSNorm : model::Normalization::kLayerNorm;
  c.position_embedding = position == "rope" ? model::PositionEmbedding::kRope
                                            : model::PositionEmbedding::kLearnedAbsolute;
  get(j, "norm_epsilon", c.norm_epsilon, where);
  get(j, "swiglu", c.swiglu, where);
  get(j, "rotary_base", c.rotary_base, where);
  get(j, "group_query_attention", c.group_query_attention, where);
  get(j, "num_query_groups", c.num_query_groups, where);
  get(j, "untie_embeddings_and_output_weights", c.untie_embeddings_and_output_weights, where);
  get(j, "add_bias_linear", c.add_bias_linear, where);
  // Absent in run states written before Qwen2, Mistral and Llama 3.x: the defaults then.
  if (j.contains("add_qkv_bias")) get(j, "add_qkv_bias", c.add_qkv_bias, where);
  if (j.contains("sliding_window")) get(j, "sliding_window", c.sliding_window, where);
  if (j.contains("rope_scaling")) c.rope_scaling = rope_scaling_from_json(j["rope_scaling"], where);
  get(j, "attention_dropout", c.attention_dropout, where);
  get(j, "hidden_dropout", c.hidden_dropout, where);
  get(j, "init_method_std", c.init_method_std, where);
  if (j.contains("moe")) c.moe = moe_from_json(j.at("moe"), where);  // absent: a dense model
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return c;
}

nlohmann::json loss_scaler_to_json(const optim::LossScalerState& s) {
  return {{"dynamic", s.dynamic},
          {"scale_window", s.scale_window},
          {"hysteresis", s.hysteresis},
          {"consecutive_hysteresis", s.consecutive_hysteresis},
          {"min_scale", s.min_scale},
          {"raise_error_at_min_scale", s.raise_error_at_min_scale},
          {"scale", s.scale},
          {"cur_hysteresis", s.cur_hysteresis},
          {"cur_iter", s.cur_iter},
          {"last_overflow_iter", s.last_overflow_iter}};
}

optim::LossScalerState loss_scaler_from_json(const nlohmann::json& j, const std::string& where) {
  optim::LossScalerState s;
  get(j, "dynamic", s.dynamic, where);
  get(j, "scale_window", s.scale_window, where);
  get(j, "hysteresis", s.hysteresis, where);
  get(j, "consecutive_hysteresis", s.consecutive_hysteresis, where);
  get(j, "min_scale", s.min_scale, where);
  get(j, "raise_error_at_min_scale", s.raise_error_at_min_scale, where);
  get(j, "scale", s.scale, where);
  get(j, "cur_hysteresis", s.cur_hysteresis, where);
  get(j, "cur_iter", s.cur_iter, where);
  get(j, "last_overflow_iter", s.last_overflow_iter, where);
  return s;
}

}  // namespace tessera::checkpoint
