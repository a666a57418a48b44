// The transformer's shape and options, named after Megatron-LM's flags, plus named presets.
//
// A decoder-only, pre-norm transformer covers both families Tessera speaks:
//   GPT-2 style: LayerNorm, learned absolute positions, GELU MLP (4C), biases, tied embeddings.
//   LLaMA style: RMSNorm, RoPE, SwiGLU MLP, no biases, GQA, untied output layer.
// The family only decides parameter *names* (Hugging Face's GPT-2 or LLaMA naming) and export
// layout; the math follows the individual options.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/kernels/rope_frequencies.h"
#include "tessera/moe/permute.h"
#include "tessera/moe/router.h"

namespace tessera::model {

enum class Normalization { kLayerNorm, kRMSNorm };
enum class PositionEmbedding { kLearnedAbsolute, kRope };
enum class Family { kGpt2, kLlama };
enum class MoeLoadBalancing { kAuxLoss, kSeqAuxLoss, kNone };
enum class MoeTokenDropPolicy { kProbs, kPosition };

// Mixture of Experts (Megatron-Core's --moe-* flags): with num_experts > 0 the MLP of every
// layer chosen by layer_freq is a router plus num_experts expert MLPs (model/moe_layer.h).
struct MoeConfig {
  int num_experts = 0;               // --num-experts (0: dense)
  std::string layer_freq = "1";      // --moe-layer-freq: N (every Nth layer) or [1,0,...] per layer
  int ffn_hidden_size = 0;           // --moe-ffn-hidden-size (0: the dense ffn size)
  int shared_expert_size = 0;        // --moe-shared-expert-intermediate-size (0: none)
  bool router_fp64 = false;          // --moe-router-dtype fp64 (default fp32)
  moe::ScoreFunction score = moe::ScoreFunction::kSoftmax;  // --moe-router-score-function
  bool pre_softmax = false;          // --moe-router-pre-softmax
  int topk = 2;                      // --moe-router-topk
  float topk_scaling = 1.0f;         // --moe-router-topk-scaling-factor
  MoeLoadBalancing load_balancing = MoeLoadBalancing::kAuxLoss;  // --moe-router-load-balancing-type
  float aux_loss_coeff = 0.0f;       // --moe-aux-loss-coeff
  float z_loss_coeff = 0.0f;         // --moe-z-loss-coeff
  bool expert_bias = false;          // --moe-router-enable-expert-bias
  float bias_update_rate = 1e-3f;    // --moe-router-bias-update-rate
  float capacity_factor = 0.0f;      // --moe-expert-capacity-factor (0: dropless)
  MoeTokenDropPolicy drop_policy = MoeTokenDropPolicy::kProbs;  // --moe-token-drop-policy
  bool pad_to_capacity = false;      // --moe-pad-expert-input-to-capacity
  // --moe-token-dispatcher-type (expert parallelism): alltoall or allgather, the same results.
  moe::DispatcherType dispatcher = moe::DispatcherType::kAllToAll;

  bool enabled() const { return num_experts > 0; }
  moe::RouterConfig router() const { return {num_experts, topk, score, pre_softmax, topk_scaling}; }
};

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
  // Llama 3.x's RoPE frequency rescaling: --use-rope-scaling (Llama 3.1's constants),
  // --rope-scaling-factor; a Hugging Face rope_scaling of rope_type "llama3" sets every field.
  kernels::RopeScaling rope_scaling;
  bool group_query_attention = false; // --group-query-attention
  int num_query_groups = 0;           // --num-query-groups (0: = heads)
  bool untie_embeddings_and_output_weights = false;
  bool add_bias_linear = true;        // false with --disable-bias-linear
  bool add_qkv_bias = false;          // --add-qkv-bias: q/k/v biases without the others (Qwen2)
  // Sliding-window attention (Mistral): token t attends to keys t - W < j <= t; 0 = full causal.
  int sliding_window = 0;
  float attention_dropout = 0.1f;     // --attention-dropout (Megatron's default)
  float hidden_dropout = 0.1f;        // --hidden-dropout (Megatron's default)
  float init_method_std = 0.02f;      // --init-method-std
  MoeConfig moe;

  int head_dim() const { return hidden_size / num_attention_heads; }
  int kv_heads() const { return group_query_attention ? num_query_groups : num_attention_heads; }
  bool qkv_bias() const { return add_bias_linear || add_qkv_bias; }  // biases on q, k and v
  int ffn() const;                    // resolved ffn hidden size
  int max_positions() const { return max_position_embeddings > 0 ? max_position_embeddings : seq_length; }
  // Vocabulary padded to a multiple of make_vocab_size_divisible_by * tp_size (Megatron).
  int64_t padded_vocab_size(int tp_size = 1) const;
  Family family() const;

  // Throws tessera::Error naming the offending flag when the options are inconsistent.
  void validate() const;
  void validate_moe() const;  // the MoE part of validate()
  // Throws tessera::Error naming the flags when the experts cannot be split over `ep_size`
  // expert-parallel ranks (no MoE layers, or num_experts not divisible by it).
  void validate_expert_parallel(int ep_size) const;
  // Throws tessera::Error (naming the flags and sizes) when the model cannot be split across
  // `tp_size` tensor-parallel ranks: heads, query groups (unless the groups divide tp_size and
  // are replicated) and ffn size must be divisible by it, and under sequence parallelism the
  // sequence length too.
  void validate_tensor_parallel(int tp_size, bool sequence_parallel) const;
  // Parameter count (real vocabulary, no padding), for reports.
  int64_t num_parameters() const;
  // Parameters one token uses (MoE layers count the router, k experts and the shared expert;
  // the rest as num_parameters()): the "active parameters" of MoE reports and FLOP counts.
  int64_t num_active_parameters() const;
  // Elements of one of `tp` tensor-parallel ranks' share of a layer's attention (q split by
  // heads, k and v by query groups, a group replicated when there are fewer than the ranks, the
  // output projection split by its input, its bias whole) and of an MLP of F features (the up
  // and gate matrices and biases split, the down projection split by its input, its bias whole).
  // At tp 1 the whole layer's: num_parameters() sums them.
  double attention_parameters(int tp = 1) const;
  double mlp_parameters(double F, int tp = 1) const;
  // Per layer (global index), whether it has an MoE block (all false when dense): parses
  // --moe-layer-freq, so callers that visit every layer take the mask once.
  std::vector<bool> moe_layer_mask() const;
  bool is_moe_layer(int layer) const;  // moe_layer_mask()[layer]
  // The resolved expert ffn size (--moe-ffn-hidden-size, default the dense ffn()).
  int moe_ffn() const { return moe.ffn_hidden_size > 0 ? moe.ffn_hidden_size : ffn(); }
};

// How flags (--moe-router-score-function ...) and checkpoints spell the MoE options' values.
const std::map<std::string, bool>& moe_router_dtype_names();  // fp64: true
const std::map<std::string, moe::ScoreFunction>& moe_score_function_names();
const std::map<std::string, MoeLoadBalancing>& moe_load_balancing_names();
const std::map<std::string, MoeTokenDropPolicy>& moe_drop_policy_names();
const std::map<std::string, moe::DispatcherType>& moe_dispatcher_names();

// Preset names: gpt2-tiny, gpt2-124m, gpt2-350m, llama-tiny, llama-1b (TinyLlama-1.1B shape),
// mixtral-tiny (LLaMA layers, 8 experts, top-2 softmax routing) and moe-tiny (DeepSeek-V3 style:
// sigmoid scores, expert bias, one shared expert).
std::vector<std::string> preset_names();
// The preset's values; throws tessera::Error for an unknown name (listing the known ones).
ModelConfig preset(const std::string& name);

}  // namespace tessera::model
