// Self-attention block: fused QKV projection, RoPE (optional), causal flash attention (MHA or
// GQA), output projection. The Q, K and V weights are separate parameters in LLaMA naming and
// one (c_attn) in GPT-2 naming; either way they are contiguous, so the projection is one GEMM
// producing the packed (N, (NH + 2KV) * HD) buffer the attention kernel reads.
#pragma once

#include <string>
#include <vector>

#include "tessera/kernels/attention.h"
#include "tessera/model/config.h"
#include "tessera/model/context.h"
#include "tessera/model/linear.h"
#include "tessera/model/parameter.h"

namespace tessera::model {

class Attention {
 public:
  struct Saved {
    Tensor inp;   // (N, C) normalised input
    Tensor qkv;   // (N, (NH+2KV)*HD), after RoPE
    Tensor attn;  // (N, NH*HD), attention output before the projection
    Tensor lse;   // (B, NH, T) fp32
  };

  static void declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg);
  Attention(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg, int layer);

  Tensor forward(const Tensor& x, Saved& s, const StepContext& ctx) const;
  Tensor backward(const Tensor& dy, const Saved& s, const StepContext& ctx) const;

 private:
  static std::vector<std::string> qkv_names(const std::string& prefix, const ModelConfig& cfg,
                                            const char* suffix);
  static std::string out_name(const std::string& prefix, const ModelConfig& cfg);
  kernels::AttentionDropout dropout(const StepContext& ctx) const;

  int NH_, KV_, HD_, layer_;
  bool rope_;
  float rope_theta_, dropout_p_;
  Linear qkv_, out_;
};

}  // namespace tessera::model
