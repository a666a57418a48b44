// MLP block: up projection, activation (GELU, or SwiGLU over a fused [gate | up] projection),
// down projection. Names: GPT-2's c_fc/c_proj, or LLaMA's gate_proj/up_proj/down_proj.
#pragma once

#include <string>
#include <vector>

#include "tessera/model/config.h"
#include "tessera/model/linear.h"
#include "tessera/model/parameter.h"

namespace tessera::model {

class Mlp {
 public:
  struct Saved {
    Tensor inp;  // (N, C)
    Tensor h;    // (N, F) or (N, 2F) for SwiGLU: the up projection's output
    Tensor act;  // (N, F): activation output, input of the down projection
  };

  static void declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg);
  Mlp(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg);

  Tensor forward(const Tensor& x, Saved& s) const;
  Tensor backward(const Tensor& dy, const Saved& s) const;

 private:
  static std::vector<std::string> up_names(const std::string& prefix, const ModelConfig& cfg,
                                           const char* suffix);
  static std::string down_name(const std::string& prefix, const ModelConfig& cfg);

  bool swiglu_;
  int64_t F_;
  Linear up_, down_;
};

}  // namespace tessera::model
