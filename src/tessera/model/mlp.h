// MLP block: up projection, activation (GELU, or SwiGLU over a fused [gate | up] projection),
// down projection. Names: GPT-2's c_fc/c_proj, or LLaMA's gate_proj/up_proj/down_proj.
// Tensor parallel: the up projection is column-parallel (gate and up split alike, so a rank's
// [gate | up] shard pairs the same F/T features) and the down projection row-parallel.
#pragma once

#include <string>
#include <vector>

#include "tessera/model/config.h"
#include "tessera/model/parallel_linear.h"
#include "tessera/model/parameter.h"

namespace tessera::model {

class Mlp {
 public:
  struct Saved {  // F is this rank's F/T features
    Tensor inp;  // (N, C) whole sequence (gathered under SP)
    Tensor h;    // (N, F) or (N, 2F) for SwiGLU: the up projection's output
    Tensor act;  // (N, F): activation output, input of the down projection
  };

  static void declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg);
  Mlp(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg,
      const parallel::TensorParallel* tp);

  // x: residual-stream rows of `batch` samples -> the same rows.
  Tensor forward(const Tensor& x, Saved& s, int64_t batch) const;
  Tensor backward(const Tensor& dy, const Saved& s, int64_t batch) const;

 private:
  static std::vector<std::string> up_names(const std::string& prefix, const ModelConfig& cfg,
                                           const char* suffix);
  static std::string down_name(const std::string& prefix, const ModelConfig& cfg);

  bool swiglu_;
  int64_t F_;  // this rank's features
  ColumnParallelLinear up_;
  RowParallelLinear down_;
};

}  // namespace tessera::model
