#include "tessera/model/config.h"

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
  if (sequence_parallel && seq_length % tp_size != 0)
    bad("--sequence-parallel", "--seq-length " + std::to_string(seq_length) +
                                   " is not divisible by " + tp);
}

int64_t ModelConfig::num_parameters() const {
  const int64_t C = hidden_size, F = ffn(), L = num_layers;
  const int64_t kv = static_cast<int64_t>(kv_heads()) * head_dim();
  const int64_t bias = add_bias_linear ? 1 : 0;
  const int64_t norm = normalization == Normalization::kLayerNorm ? 2 * C : C;
  int64_t attn = C * (C + 2 * kv) + bias * (C + 2 * kv) + C * C + bias * C;
  int64_t mlp = swiglu ? 3 * C * F + bias * (2 * F + C) : 2 * C * F + bias * (F + C);
  int64_t total = L * (attn + mlp + 2 * norm) + norm + vocab_size * C;
  if (position_embedding == PositionEmbedding::kLearnedAbsolute) total += max_positions() * C;
  if (untie_embeddings_and_output_weights) total += vocab_size * C;
  return total;
}

std::vector<std::string> preset_names() {
  return {"gpt2-tiny", "gpt2-124m", "gpt2-350m", "llama-tiny", "llama-1b"};
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
  std::ostringstream known;
  for (const auto& n : preset_names()) known << " " << n;
  throw Error("--model: unknown preset '" + name + "' (known:" + known.str() + ")");
}

}  // namespace tessera::model
