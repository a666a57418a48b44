#include "tessera/model/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::model {

int ModelConfig::ffn() const {
  if (ffn_hidden_size > 0) return ffn_hidden_size;
  // Megatron's default for SwiGLU keeps the parameter count of a 4C GELU MLP: 2/3 of 4C, rounded
  // down to a multiple of 64.
  if (swiglu) {
    const int two_thirds = 4 * hidden_size * 2 / 3;
    return two_thirds >= 64 ? two_thirds / 64 * 64 : two_thirds;
  }
  return 4 * hidden_size;
}

int64_t ModelConfig::padded_vocab_size(int tp_size) const {
  const int64_t multiple = static_cast<int64_t>(make_vocab_size_divisible_by) * tp_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

Family ModelConfig::family() const {
  const bool llama_like = normalization == Normalization::kRMSNorm || swiglu ||
                          position_embedding == PositionEmbedding::kRope;
  return llama_like ? Family::kLlama : Family::kGpt2;
}

namespace {
[[noreturn]] void bad(const std::string& flag, const std::string& what) {
  throw Error(flag + ": " + what);
}
}  // namespace

namespace {

// --moe-layer-freq as one 0/1 per layer: an integer N (every Nth layer, from layer 0, Megatron's
// meaning), a list "[1,0,1,0]", or a list repeated "[1,0]*2" (also "([1,0])*2"). Empty: the text
// is malformed or the list has the wrong length (`why` says which).
std::vector<int> moe_layer_pattern(const std::string& text, int layers, std::string* why) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  std::vector<int> out;
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c); })) {
    const long n = std::strtol(s.c_str(), nullptr, 10);
    if (n < 1) {
      *why = "an integer frequency must be >= 1";
      return {};
    }
    for (int l = 0; l < layers; ++l) out.push_back(l % n == 0 ? 1 : 0);
    return out;
  }
  if (s.size() > 2 && s.front() == '(' ) {  // "([..])*N" -> "[..]*N"
    const size_t close = s.find(')');
    if (close == std::string::npos) {
      *why = "unbalanced parentheses";
      return {};
    }
    s = s.substr(1, close - 1) + s.substr(close + 1);
  }
  const size_t close = s.find(']');
  if (s.empty() || s.front() != '[' || close == std::string::npos) {
    *why = "expected an integer or a list like [1,0,1,0]";
    return {};
  }
  std::vector<int> one;
  std::stringstream items(s.substr(1, close - 1));
  for (std::string item; std::getline(items, item, ',');) {
    if (item != "0" && item != "1") {
      *why = "list entries must be 0 or 1, got '" + item + "'";
      return {};
    }
    one.push_back(item == "1");
  }
  long repeat = 1;
  const std::string rest = s.substr(close + 1);
  if (!rest.empty()) {
    char* end = nullptr;
    if (rest[0] != '*' || (repeat = std::strtol(rest.c_str() + 1, &end, 10)) < 1 || *end != 0) {
      *why = "expected [..]*N after the list, got '" + rest + "'";
      return {};
    }
  }
  for (long r = 0; r < repeat; ++r) out.insert(out.end(), one.begin(), one.end());
  if (static_cast<int>(out.size()) != layers) {
    *why = "the list has " + std::to_string(out.size()) + " entries, --num-layers is " +
           std::to_string(layers);
    return {};
  }
  return out;
}

}  // namespace

std::vector<bool> ModelConfig::moe_layer_mask() const {
  if (!moe.enabled()) return std::vector<bool>(num_layers, false);
  std::string why;
  const std::vector<int> pattern = moe_layer_pattern(moe.layer_freq, num_layers, &why);
  if (pattern.empty()) bad("--moe-layer-freq", "'" + moe.layer_freq + "': " + why);
  return std::vector<bool>(pattern.begin(), pattern.end());
}

bool ModelConfig::is_moe_layer(int layer) const { return moe_layer_mask().at(layer); }

void ModelConfig::validate() const {
  if (num_layers < 1) bad("--num-layers", "must be >= 1, got " + std::to_string(num_layers));
  if (hidden_size < 1) bad("--hidden-size", "must be >= 1, got " + std::to_string(hidden_size));
  if (num_attention_heads < 1)
    bad("--num-attention-heads", "must be >= 1, got " + std::to_string(num_attention_heads));
  if (hidden_size % num_attention_heads != 0)
    bad("--num-attention-heads", std::to_string(num_attention_heads) +
                                     " does not divide --hidden-size " + std::to_string(hidden_size));
  if (head_dim() % 2 != 0 && position_embedding == PositionEmbedding::kRope)
    bad("--position-embedding-type", "rope needs an even head dim, got " + std::to_string(head_dim()));
  if (group_query_attention) {
    if (num_query_groups < 1)
      bad("--num-query-groups", "must be >= 1 with --group-query-attention");
    if (num_attention_heads % num_query_groups != 0)
      bad("--num-query-groups", std::to_string(num_query_groups) +
                                    " does not divide --num-attention-heads " +
                                    std::to_string(num_attention_heads));
  }
  if (ffn_hidden_size < 0) bad("--ffn-hidden-size", "must be >= 0");
  if (seq_length < 1) bad("--seq-length", "must be >= 1, got " + std::to_string(seq_length));
  if (position_embedding == PositionEmbedding::kLearnedAbsolute && max_positions() < seq_length)
    bad("--max-position-embeddings", std::to_string(max_positions()) + " is less than --seq-length " +
                                         std::to_string(seq_length));
  if (vocab_size < 2) bad("--vocab-size", "must be >= 2, got " + std::to_string(vocab_size));
  if (vocab_size > (int64_t{1} << 31) - 1) bad("--vocab-size", "must fit in int32");
  if (make_vocab_size_divisible_by < 1) bad("--make-vocab-size-divisible-by", "must be >= 1");
  if (!(norm_epsilon > 0)) bad("--norm-epsilon", "must be > 0");
  if (!(attention_dropout >= 0 && attention_dropout < 1))
    bad("--attention-dropout", "must be in [0, 1)");
  if (!(hidden_dropout >= 0 && hidden_dropout < 1)) bad("--hidden-dropout", "must be in [0, 1)");
  if (!(init_method_std > 0)) bad("--init-method-std", "must be > 0");
  if (!(rotary_base > 0)) bad("--rotary-base", "must be > 0");
  if (rope_scaling.llama3) {
    if (position_embedding != PositionEmbedding::kRope)
      bad("--use-rope-scaling", "needs --position-embedding-type rope");
    if (!(rope_scaling.factor > 0)) bad("--rope-scaling-factor", "must be > 0");
    if (!(rope_scaling.low_freq_factor > 0) ||
        !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor))
      bad("--use-rope-scaling", "needs 0 < low_freq_factor < high_freq_factor");
    if (rope_scaling.original_max_position_embeddings < 1)
      bad("--use-rope-scaling", "original_max_position_embeddings must be >= 1");
  }
  if (sliding_window < 0) bad("sliding_window", "must be >= 0 (0: full attention)");
  validate_moe();
}

void ModelConfig::validate_moe() const {
  if (moe.num_experts < 0)
    bad("--num-experts", "must be >= 0, got " + std::to_string(moe.num_experts));
  if (!moe.enabled()) return;
  moe.router().validate();
  std::string why;
  if (moe_layer_pattern(moe.layer_freq, num_layers, &why).empty())
    bad("--moe-layer-freq", "'" + moe.layer_freq + "': " + why);
  if (moe.ffn_hidden_size < 0) bad("--moe-ffn-hidden-size", "must be >= 0");
  if (moe.shared_expert_size < 0) bad("--moe-shared-expert-intermediate-size", "must be >= 0");
  if (!(moe.topk_scaling > 0)) bad("--moe-router-topk-scaling-factor", "must be > 0");
  if (!(moe.aux_loss_coeff >= 0)) bad("--moe-aux-loss-coeff", "must be >= 0");
  if (!(moe.z_loss_coeff >= 0)) bad("--moe-z-loss-coeff", "must be >= 0");
  if (!(moe.capacity_factor >= 0))
    bad("--moe-expert-capacity-factor", "must be > 0 (leave it out for dropless routing)");
  if (moe.pad_to_capacity && moe.capacity_factor == 0)
    bad("--moe-pad-expert-input-to-capacity", "needs --moe-expert-capacity-factor");
  if (moe.expert_bias && moe.score != moe::ScoreFunction::kSigmoid)
    bad("--moe-router-enable-expert-bias", "goes with --moe-router-score-function sigmoid");
  if (!(moe.bias_update_rate >= 0)) bad("--moe-router-bias-update-rate", "must be >= 0");
}

void ModelConfig::validate_tensor_parallel(int tp_size, bool sequence_parallel) const {
  const std::string tp = "--tensor-model-parallel-size " + std::to_string(tp_size);
  if (num_attention_heads % tp_size != 0)
    bad("--num-attention-heads", std::to_string(num_attention_heads) + " is not divisible by " + tp);
  const int kv = kv_heads();
  if (kv % tp_size != 0 && tp_size % kv != 0)
    bad("--num-query-groups", std::to_string(kv) + " is neither divisible by " + tp +
                                  " nor a divisor of it (groups are split, or replicated when "
                                  "there are fewer groups than ranks)");
  if (ffn() % tp_size != 0)
    bad("--ffn-hidden-size", std::to_string(ffn()) + " is not divisible by " + tp);
  if (moe.enabled() && moe_ffn() % tp_size != 0)
    bad("--moe-ffn-hidden-size", std::to_string(moe_ffn()) + " is not divisible by " + tp +
                                     " (experts are split like the MLP)");
  if (moe.enabled() && moe.shared_expert_size % tp_size != 0)
    bad("--moe-shared-expert-intermediate-size",
        std::to_string(moe.shared_expert_size) + " is not divisible by " + tp);
  if (sequence_parallel && seq_length % tp_size != 0)
    bad("--sequence-parallel", "--seq-length " + std::to_string(seq_length) +
                                   " is not divisible by " + tp);
}

double ModelConfig::attention_parameters(int tp) const {
  const double C = hidden_size, HD = head_dim(), bias = add_bias_linear ? 1 : 0;
  const double q = C / tp, kv = std::max(1, kv_heads() / tp) * HD;
  return C * (q + 2 * kv) + (qkv_bias() ? 1 : 0) * (q + 2 * kv) + C / tp * C + bias * C;
}

double ModelConfig::mlp_parameters(double F, int tp) const {
  const double C = hidden_size, bias = add_bias_linear ? 1 : 0;
  const double up = swiglu ? 2 * F : F;
  return C * up / tp + F / tp * C + bias * (up / tp + C);
}

namespace {
int64_t count_parameters(const ModelConfig& c, int experts_counted) {
  const int64_t C = c.hidden_size, L = c.num_layers;
  const int64_t norm = c.normalization == Normalization::kLayerNorm ? 2 * C : C;
  // The per-layer counts are whole numbers at tp 1, exact in a double.
  const auto mlp = [&](int64_t F) { return static_cast<int64_t>(c.mlp_parameters(F)); };
  const int64_t attn = static_cast<int64_t>(c.attention_parameters());
  int64_t total = L * (attn + 2 * norm) + norm + c.vocab_size * C;
  const std::vector<bool> moe_layer = c.moe_layer_mask();
  for (int l = 0; l < L; ++l) {
    if (!moe_layer[l]) {
      total += mlp(c.ffn());
      continue;
    }
    total += C * c.moe.num_experts + experts_counted * mlp(c.moe_ffn());
    if (c.moe.shared_expert_size > 0) total += mlp(c.moe.shared_expert_size);
  }
  if (c.position_embedding == PositionEmbedding::kLearnedAbsolute) total += c.max_positions() * C;
  if (c.untie_embeddings_and_output_weights) total += c.vocab_size * C;
  return total;
}
}  // namespace

int64_t ModelConfig::num_active_parameters() const { return count_parameters(*this, moe.topk); }

void ModelConfig::validate_expert_parallel(int ep_size) const {
  if (ep_size <= 1) return;
  const std::string ep = "--expert-model-parallel-size " + std::to_string(ep_size);
  if (!moe.enabled()) bad(ep, "needs an MoE model (--num-experts)");
  if (moe.num_experts % ep_size != 0)
    bad("--num-experts", std::to_string(moe.num_experts) + " is not divisible by " + ep);
}

int64_t ModelConfig::num_parameters() const { return count_parameters(*this, moe.num_experts); }

const std::map<std::string, bool>& moe_router_dtype_names() {
  static const std::map<std::string, bool> names = {{"fp32", false}, {"fp64", true}};
  return names;
}
const std::map<std::string, moe::ScoreFunction>& moe_score_function_names() {
  static const std::map<std::string, moe::ScoreFunction> names = {
      {"softmax", moe::ScoreFunction::kSoftmax}, {"sigmoid", moe::ScoreFunction::kSigmoid}};
  return names;
}
const std::map<std::string, MoeLoadBalancing>& moe_load_balancing_names() {
  static const std::map<std::string, MoeLoadBalancing> names = {
      {"aux_loss", MoeLoadBalancing::kAuxLoss},
      {"seq_aux_loss", MoeLoadBalancing::kSeqAuxLoss},
      {"none", MoeLoadBalancing::kNone}};
  return names;
}
const std::map<std::string, MoeTokenDropPolicy>& moe_drop_policy_names() {
  static const std::map<std::string, MoeTokenDropPolicy> names = {
      {"probs", MoeTokenDropPolicy::kProbs}, {"position", MoeTokenDropPolicy::kPosition}};
  return names;
}
const std::map<std::string, moe::DispatcherType>& moe_dispatcher_names() {
  static const std::map<std::string, moe::DispatcherType> names = {
      {"alltoall", moe::DispatcherType::kAllToAll},
      {"allgather", moe::DispatcherType::kAllGather}};
  return names;
}

std::vector<std::string> preset_names() {
  return {"gpt2-tiny",  "gpt2-124m",    "gpt2-350m", "llama-tiny",
          "llama-1b",   "mixtral-tiny", "moe-tiny"};
}

namespace {
ModelConfig gpt2(int layers, int hidden, int heads, int seq) {
  ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.seq_length = seq;
  c.max_position_embeddings = 1024;
  c.vocab_size = 50257;
  c.normalization = Normalization::kLayerNorm;
  c.position_embedding = PositionEmbedding::kLearnedAbsolute;
  return c;
}
ModelConfig llama(int layers, int hidden, int heads, int groups, int ffn, int seq) {
  ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.group_query_attention = groups != heads;
  c.num_query_groups = groups;
  c.ffn_hidden_size = ffn;
  c.seq_length = seq;
  c.max_position_embeddings = seq;
  c.vocab_size = 32000;
  c.normalization = Normalization::kRMSNorm;
  c.norm_epsilon = 1e-5f;
  c.swiglu = true;
  c.position_embedding = PositionEmbedding::kRope;
  c.untie_embeddings_and_output_weights = true;
  c.add_bias_linear = false;
  c.attention_dropout = 0.0f;  // LLaMA trains without dropout
  c.hidden_dropout = 0.0f;
  return c;
}
}  // namespace

ModelConfig preset(const std::string& name) {
  if (name == "gpt2-tiny") {
    ModelConfig c = gpt2(2, 64, 4, 64);
    c.vocab_size = 257;  // byte-level tokenizer + EOD
    c.max_position_embeddings = 128;
    return c;
  }
  if (name == "gpt2-124m") return gpt2(12, 768, 12, 1024);
  if (name == "gpt2-350m") return gpt2(24, 1024, 16, 1024);
  if (name == "llama-tiny") {
    ModelConfig c = llama(2, 64, 4, 2, 176, 64);
    c.vocab_size = 257;
    return c;
  }
  if (name == "llama-1b") return llama(22, 2048, 32, 4, 5632, 2048);  // TinyLlama-1.1B
  if (name == "mixtral-tiny") {  // Mixtral's layout at llama-tiny's size
    ModelConfig c = preset("llama-tiny");
    c.moe.num_experts = 8;
    c.moe.topk = 2;
    c.moe.aux_loss_coeff = 0.02f;  // Mixtral's router_aux_loss_coef
    return c;
  }
  if (name == "moe-tiny") {  // DeepSeek-V3's routing at llama-tiny's size
    ModelConfig c = preset("llama-tiny");
    c.moe.num_experts = 8;
    c.moe.topk = 2;
    c.moe.ffn_hidden_size = 64;
    c.moe.shared_expert_size = 64;
    c.moe.score = moe::ScoreFunction::kSigmoid;
    c.moe.expert_bias = true;
    c.moe.topk_scaling = 2.5f;  // DeepSeek-V3's routed_scaling_factor
    c.moe.load_balancing = MoeLoadBalancing::kSeqAuxLoss;
    c.moe.aux_loss_coeff = 1e-4f;  // DeepSeek-V3's sequence-wise balance loss factor
    return c;
  }
  std::ostringstream known;
  for (const auto& n : preset_names()) known << " " << n;
  throw Error("--model: unknown preset '" + name + "' (known:" + known.str() + ")");
}

}  // namespace tessera::model
