// MLP block: up projection, activation (GELU, or SwiGLU over a fused [gate | up] projection),
// down projection. Names: GPT-2's c_fc/c_proj, or LLaMA's gate_proj/up_proj/down_proj (the
// dense MLP); an MoE layer's experts name theirs (Mixtral's w1/w3/w2) and choose their size.
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
    Tensor inp;   // the input as forward() received it (under SP this rank's rows)
    Tensor h;     // (N, F) or (N, 2F) for SwiGLU: the up projection's output
    Tensor act;   // (N, F): activation output, input of the down projection
  };

  // The parameters' names: the up projection's weights (gate then up for SwiGLU, consecutive so
  // they fuse) and biases, the down projection's weight and bias.
  struct Names {
    std::vector<std::string> up_weights, up_biases;
    std::string down_weight, down_bias;
  };
  // The names of projections `up` (gate then up for SwiGLU) and `down`: "<name>.weight" and
  // "<name>.bias" each.
  static Names projection_names(const std::vector<std::string>& up, const std::string& down);
  // The dense MLP's names under `prefix` ("...mlp"): GPT-2's or LLaMA's.
  static Names dense_names(const std::string& prefix, const ModelConfig& cfg);

  // The dense MLP (cfg.ffn() features) at `prefix`.
  static void declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg);
  Mlp(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg,
      const parallel::TensorParallel* tp);
  // An MLP of `ffn` features named `names` (biases only with cfg.add_bias_linear); with
  // `split` false its parameters are whole on every rank, not split over TP (an MoE expert under
  // expert tensor parallelism 1), and the MLP must be given a TensorParallel of size 1.
  static void declare(ParameterSet& params, const Names& names, int64_t ffn, const ModelConfig& cfg,
                      bool split = true);
  Mlp(ParameterSet& params, const Names& names, int64_t ffn, const ModelConfig& cfg,
      const parallel::TensorParallel* tp);

  // x: residual-stream rows of `batch` samples -> the same rows.
  Tensor forward(const Tensor& x, Saved& s, int64_t batch) const;
  // The weights quantized for inference (Linear::quantize).
  void quantize(const WeightQuantizer& quantizer) {
    up_.quantize(quantizer);
    down_.quantize(quantizer);
  }
  Tensor backward(const Tensor& dy, const Saved& s, int64_t batch) const;

 private:
  bool swiglu_;
  int64_t F_;  // this rank's features
  ColumnParallelLinear up_;
  RowParallelLinear down_;
};

}  // namespace tessera::model
