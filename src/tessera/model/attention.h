// Self-attention block: fused QKV projection, RoPE (optional), causal flash attention (MHA or
// GQA), output projection. The Q, K and V weights are separate parameters in LLaMA naming and
// one (c_attn) in GPT-2 naming; either way they are contiguous, so the projection is one GEMM
// producing the packed (N, (NH + 2KV) * HD) buffer the attention kernel reads.
//
// Tensor parallel (T ranks): QKV is column-parallel and the output projection row-parallel, by
// heads. Rank r holds query heads [r*NH/T, (r+1)*NH/T) and their key/value groups: KV/T groups
// when T divides KV; when KV divides T (fewer groups than ranks) the one group its query heads
// use, replicated on T/KV ranks (whose gradients the trainer sums:
// distributed/tensor_parallel_grads.h).
#pragma once

#include <string>
#include <vector>

#include "tessera/kernels/attention.h"
#include "tessera/model/config.h"
#include "tessera/model/context.h"
#include "tessera/model/parallel_linear.h"
#include "tessera/model/parameter.h"

namespace tessera::model {

class Attention {
 public:
  struct Saved {
    Tensor inp;   // (N, C) normalised input, whole sequence (gathered under SP)
    Tensor qkv;   // (N, (NH+2KV)*HD) of this rank's heads, after RoPE
    Tensor attn;  // (N, NH*HD) of this rank's heads, attention output before the projection
    Tensor lse;   // (B, NH, T) fp32, this rank's heads
  };

  static void declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg);
  Attention(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg, int layer,
            const parallel::TensorParallel* tp);

  // x: residual-stream rows (ctx.local_N(), C) -> (ctx.local_N(), C).
  Tensor forward(const Tensor& x, Saved& s, const StepContext& ctx) const;
  Tensor backward(const Tensor& dy, const Saved& s, const StepContext& ctx) const;
  // Selective recomputation: forward drops the core's output and log-sum-exp (Saved::attn,
  // Saved::lse) once the projection has used them; backward recomputes them from Saved::qkv.
  void set_recompute_core(bool on) { recompute_core_ = on; }

 private:
  static std::vector<std::string> qkv_names(const std::string& prefix, const ModelConfig& cfg,
                                            const char* suffix);
  static std::string out_name(const std::string& prefix, const ModelConfig& cfg);
  kernels::AttentionDropout dropout(const StepContext& ctx) const;
  void core(Tensor& attn, Tensor& lse, const Tensor& qkv, const StepContext& ctx) const;

  int NH_global_;                           // query heads of the whole model (dropout coordinates)
  int NH_, KV_, HD_, head_offset_, layer_;  // this rank's heads, its first query head
  bool rope_, recompute_core_ = false;
  float rope_theta_, dropout_p_;
  ColumnParallelLinear qkv_;
  RowParallelLinear out_;
};

}  // namespace tessera::model
