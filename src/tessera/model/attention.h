// Self-attention block: fused QKV projection, RoPE (optional, Llama 3.x-scaled or not), causal
// flash attention (MHA or GQA; a sliding window optional), output projection. The Q, K and V
// weights are separate parameters in LLaMA naming and one (c_attn) in GPT-2 naming; either way
// they are contiguous, so the projection is one GEMM producing the packed (N, (NH + 2KV) * HD)
// buffer the attention kernel reads. Their biases: all linear biases (add_bias_linear) or q/k/v
// only (add_qkv_bias, Qwen2's).
//
// Tensor parallel (T ranks): QKV is column-parallel and the output projection row-parallel, by
// heads. Rank r holds query heads [r*NH/T, (r+1)*NH/T) and their key/value groups: KV/T groups
// when T divides KV; when KV divides T (fewer groups than ranks) the one group its query heads
// use, replicated on T/KV ranks (whose gradients the trainer sums:
// distributed/tensor_parallel_grads.h).
//
// Context parallel (context/context_parallel.h): the projections and RoPE work on this rank's
// tokens; the core follows the layer's communication type. With a2a (Ulysses) q, k, v go to the
// head split (whole sequences, 1/N of this rank's heads), the kernel runs on them as it would
// without CP, and the output comes back to the sequence split (context/head_exchange.h). With
// p2p and all_gather the queries stay and the other ranks' key/value blocks come to them
// (context/block_attention.h). With a2a+p2p the all-to-all runs inside groups of A ranks (each
// then holds its group's tokens of 1/A of the heads) and the blocks go round the groups. A
// sliding window shorter than --seq-length runs without CP and under a2a only (the constructor
// refuses the other types with a tessera::Error).
#pragma once

#include <string>
#include <vector>

#include "tessera/context/block_attention.h"
#include "tessera/context/context_parallel.h"
#include "tessera/context/head_exchange.h"
#include "tessera/kernels/attention.h"
#include "tessera/model/config.h"
#include "tessera/model/context.h"
#include "tessera/model/kv_cache_view.h"
#include "tessera/model/parallel_linear.h"
#include "tessera/model/parameter.h"

namespace tessera::model {

class Attention {
 public:
  struct Saved {
    Tensor inp;   // normalised input as forward() received it (under SP this rank's rows)
    Tensor qkv;   // (N, (NH+2KV)*HD) of this rank's heads, after RoPE; under CP a2a and
                  // a2a+p2p the head split (B * A * T rows, HeadColumns' columns; A = N for a2a)
    Tensor attn;  // (N, NH*HD) of this rank's heads, attention output before the projection
    Tensor attn_heads;  // a2a and a2a+p2p: the core's output in the head split
    Tensor lse;         // (B, NH, T) fp32, this rank's heads (head split: (B, NH/A, A * T))
  };

  static void declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg);
  // `cp`: the context-parallel group (nullptr or size 1: none).
  Attention(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg, int layer,
            const parallel::TensorParallel* tp, const context::ContextParallel* cp = nullptr);

  // x: residual-stream rows (ctx.local_N(), C) -> (ctx.local_N(), C).
  Tensor forward(const Tensor& x, Saved& s, const StepContext& ctx) const;
  Tensor backward(const Tensor& dy, const Saved& s, const StepContext& ctx) const;
  // Selective recomputation: forward drops the core's output and log-sum-exp (Saved::attn,
  // Saved::lse) once the projection has used them; backward recomputes them from Saved::qkv.
  void set_recompute_core(bool on) { recompute_core_ = on; }
  // The projections' weights quantized for inference (Linear::quantize).
  void quantize(const WeightQuantizer& quantizer) {
    qkv_.quantize(quantizer);
    out_.quantize(quantizer);
  }

  // Inference (no CP, no SP): x holds the new tokens of `seqs` (kv_cache_view.h), whose
  // positions are ctx.sample_positions (B 1, T rows); their keys and values (after RoPE) are
  // written to `cache`, and each attends causally to its sequence's cached tokens and itself:
  // the block kernel over each cache block, merged by log-sum-exp (attention_merge.h), the
  // arithmetic of the training kernels up to the order of sums. A sliding window limits the keys
  // as in training. -> (rows, C); nothing kept.
  Tensor forward_cached(const Tensor& x, const StepContext& ctx, const KvBlocks& cache,
                        const std::vector<CachedSequence>& seqs) const;

 private:
  static std::vector<std::string> qkv_names(const std::string& prefix, const ModelConfig& cfg,
                                            const char* suffix);
  static std::string out_name(const std::string& prefix, const ModelConfig& cfg);
  kernels::AttentionDropout dropout(const StepContext& ctx) const;
  // The attention core from the roped qkv (after the all-to-all in the head-split modes): attn
  // (this rank's tokens, all its heads) and lse, and attn_heads in the head-split modes.
  void core(Tensor& attn, Tensor& attn_heads, Tensor& lse, const Tensor& qkv,
            const StepContext& ctx) const;
  struct Whole;  // the whole-sequence kernel's arguments (attention.cc)
  Whole whole(const StepContext& ctx) const;
  kernels::AttentionDropout head_split_dropout(const StepContext& ctx) const;
  // The block attention's shape: of this rank's tokens (p2p, all_gather) or of its all-to-all
  // group's tokens and heads (a2a+p2p, whose document starts go to `doc`).
  context::BlockAttentionShape block_shape(const StepContext& ctx, std::vector<int32_t>* doc) const;
  bool head_split() const { return mode_ == CpMode::kA2A || mode_ == CpMode::kA2AP2P; }

  // How the core runs under context parallelism: the whole-sequence kernel on this rank's tokens
  // (none), after an all-to-all over the CP group (a2a), block by block (p2p, all_gather), or
  // block by block over a ring of all-to-all groups (a2a+p2p).
  enum class CpMode { kNone, kA2A, kBlocks, kA2AP2P };

  int NH_global_;                           // query heads of the whole model (dropout coordinates)
  int NH_, KV_, HD_, head_offset_, layer_;  // this rank's heads, its first query head
  CpMode mode_ = CpMode::kNone;
  int cp_size_ = 1;                 // the context-parallel group
  std::vector<int> a2a_cp_ranks_;   // a2a, a2a+p2p: CP ranks of the all-to-all group
  int a2a_rank_ = 0;                // this rank in it
  int cp_heads_ = 0, cp_kv_ = 0;    // query heads and groups of the head split
  context::HeadExchange exchange_;  // the all-to-all and its column layouts
  context::HeadColumns qkv_cols_, out_cols_;
  context::BlockAttention blocks_;  // p2p, all_gather, a2a+p2p
  bool rope_, recompute_core_ = false;
  float rope_theta_;
  kernels::RopeScaling rope_scaling_;
  int64_t window_;  // sliding window (0: none; the kernel ignores one >= the sequence)
  float dropout_p_;
  ColumnParallelLinear qkv_;
  RowParallelLinear out_;
};

}  // namespace tessera::model
