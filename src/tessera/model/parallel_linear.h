// Megatron's column- and row-parallel linear layers over this rank's weight shards.
//
//   ColumnParallelLinear: W (OC, C) split by output rows. Input: the residual stream's rows
//     (the sequence slice under --sequence-parallel, gathered here, and again in backward);
//     output: (B*S, OC/T), this rank's features of every token. The bias is split like the rows.
//   RowParallelLinear: W (OC, IC) split by input columns. Input: (B*S, IC/T) from a column
//     layer; output: the residual stream's rows (B*S_local, OC), the partial products reduced
//     over TP (all-reduce, or reduce-scatter under SP). The bias is whole on every rank and added
//     once, after the reduction.
//
// With TP 1 both are a plain Linear (no communication). `batch` is the number of samples B in
// the rows (the sequence-parallel mappings need it, see tensor_parallel.h).
#pragma once

#include "tessera/model/linear.h"
#include "tessera/parallel/tensor_parallel.h"

namespace tessera::model {

class ColumnParallelLinear {
 public:
  // What forward() hands back for backward() under sequence parallelism.
  enum class KeptInput {
    // The rows the residual stream holds (B*S_local, C); backward gathers them again (Megatron's
    // choice: a layer keeps 1/T of its input, for one more all-gather in backward). For layers
    // whose input is kept between forward and backward.
    kLocalRows,
    // The gathered input (B*S, C): no second gather. For a layer whose backward follows its
    // forward at once (the output layer), where nothing is kept between them.
    kGathered,
  };

  ColumnParallelLinear() = default;
  ColumnParallelLinear(Linear local, const parallel::TensorParallel* tp,
                       KeptInput kept = KeptInput::kLocalRows)
      : local_(std::move(local)), tp_(tp), kept_(kept) {}

  // x: residual-stream rows (B*S_local, C) -> (B*S, OC/T). *input receives what backward()
  // needs: x itself (a handle to the same storage: the caller must not change x before
  // backward), or under SP with kGathered the gathered (B*S, C) copy.
  Tensor forward(const Tensor& x, int64_t batch, Tensor* input) const;
  // dy (B*S, OC/T), input from forward -> dx (B*S_local, C); accumulates dW, db.
  Tensor backward(const Tensor& dy, const Tensor& input, int64_t batch) const;
  // This rank's weight shard quantized for inference (Linear::quantize).
  void quantize(const WeightQuantizer& quantizer) { local_.quantize(quantizer); }

 private:
  Linear local_;
  const parallel::TensorParallel* tp_ = nullptr;
  KeptInput kept_ = KeptInput::kLocalRows;
};

class RowParallelLinear {
 public:
  RowParallelLinear() = default;
  // local: the weight shard, without bias; bias/dbias: the whole bias (undefined for none).
  RowParallelLinear(Linear local, Tensor bias, Tensor dbias, const parallel::TensorParallel* tp)
      : local_(std::move(local)), bias_(std::move(bias)), dbias_(std::move(dbias)), tp_(tp) {}

  // x (B*S, IC/T) -> residual-stream rows (B*S_local, OC).
  Tensor forward(const Tensor& x, int64_t batch) const;
  // dy (B*S_local, OC), x the forward input -> dx (B*S, IC/T); accumulates dW, db.
  Tensor backward(const Tensor& dy, const Tensor& x, int64_t batch) const;
  // This rank's weight shard quantized for inference (Linear::quantize). Per-row scales are the
  // shard's rows' (the columns this rank holds).
  void quantize(const WeightQuantizer& quantizer) { local_.quantize(quantizer); }

 private:
  Linear local_;
  Tensor bias_;
  mutable Tensor dbias_;  // backward() is const but accumulates through this view
  const parallel::TensorParallel* tp_ = nullptr;
};

}  // namespace tessera::model
