// The transformer's shape and options, named after Megatron-LM's flags, plus named presets.
//
// A decoder-only, pre-norm transformer covers both families Tessera speaks:
//   GPT-2 style: LayerNorm, learned absolute positions, GELU MLP (4C), biases, tied embeddings.
//   LLaMA style: RMSNorm, RoPE, SwiGLU MLP, no biases, GQA, untied output layer.
// The family only decides parameter *names* (Hugging Face's GPT-2 or LLaMA naming) and export
// layout; the math follows the individual options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::model {

enum class Normalization { kLayerNorm, kRMSNorm };
enum class PositionEmbedding { kLearnedAbsolute, kRope };
enum class Family { kGpt2, kLlama };

struct ModelConfig {
  int num_layers = 2;                 // --num-layers
  int hidden_size = 64;               // --hidden-size
  int num_attention_heads = 4;        // --num-attention-heads
  int ffn_hidden_size = 0;            // --ffn-hidden-size (0: 4C, or Megatron's 2/3*4C rule with --swiglu)
  int seq_length = 64;                // --seq-length
  int max_position_embeddings = 0;    // --max-position-embeddings (0: seq_length)
  int64_t vocab_size = 257;           // --vocab-size (real vocabulary, before padding)
  int make_vocab_size_divisible_by = 128;  // --make-vocab-size-divisible-by
  Normalization normalization = Normalization::kLayerNorm;  // --normalization
  float norm_epsilon = 1e-5f;         // --norm-epsilon
  bool swiglu = false;                // --swiglu
  PositionEmbedding position_embedding = PositionEmbedding::kLearnedAbsolute;
  float rotary_base = 10000.0f;       // --rotary-base
  bool group_query_attention = false; // --group-query-attention
  int num_query_groups = 0;           // --num-query-groups (0: = heads)
  bool untie_embeddings_and_output_weights = false;
  bool add_bias_linear = true;        // false with --disable-bias-linear
  float attention_dropout = 0.1f;     // --attention-dropout (Megatron's default)
  float hidden_dropout = 0.1f;        // --hidden-dropout (Megatron's default)
  float init_method_std = 0.02f;      // --init-method-std

  int head_dim() const { return hidden_size / num_attention_heads; }
  int kv_heads() const { return group_query_attention ? num_query_groups : num_attention_heads; }
  int ffn() const;                    // resolved ffn hidden size
  int max_positions() const { return max_position_embeddings > 0 ? max_position_embeddings : seq_length; }
  // Vocabulary padded to a multiple of make_vocab_size_divisible_by * tp_size (Megatron).
  int64_t padded_vocab_size(int tp_size = 1) const;
  Family family() const;

  // Throws tessera::Error naming the offending flag when the options are inconsistent.
  void validate() const;
  // Throws tessera::Error (naming the flags and sizes) when the model cannot be split across
  // `tp_size` tensor-parallel ranks: heads, query groups (unless the groups divide tp_size and
  // are replicated) and ffn size must be divisible by it, and under sequence parallelism the
  // sequence length too.
  void validate_tensor_parallel(int tp_size, bool sequence_parallel) const;
  // Parameter count (real vocabulary, no padding), for reports.
  int64_t num_parameters() const;
};

// Preset names: gpt2-tiny, gpt2-124m, gpt2-350m, llama-tiny, llama-1b (TinyLlama-1.1B shape).
std::vector<std::string> preset_names();
// The preset's values; throws tessera::Error for an unknown name (listing the known ones).
ModelConfig preset(const std::string& name);

}  // namespace tessera::model
