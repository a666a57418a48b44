// Parameters and the flat buffers that hold them.
//
// Every Parameter is one tensor of the Hugging Face checkpoint of its model family (canonical
// name, e.g. "model.layers.3.mlp.up_proj.weight"), with its *global* shape in Tessera's layout
// (linear weights are (out, in) like torch.nn.Linear; exporters transpose GPT-2's Conv1D). Its
// compute-dtype value and fp32 gradient are views into two flat buffers owned by the
// ParameterSet, in registration order, so the optimizer steps one contiguous range and
// consecutive parameters can be fused into one GEMM (q/k/v, gate/up) through a spanning view.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::model {

// How a parameter's global tensor is split across the tensor-parallel group. ZeRO partitioning
// is not here: it belongs to the optimizer's flat buffers.
struct ShardSpec {
  int tp_dim = -1;          // dim split over TP; -1 = replicated across TP
  int64_t vocab_rows = 0;   // real (unpadded) rows when dim 0 is a padded vocabulary
  bool expert = false;      // lives in the expert grid instead of the dense one
};

// How a parameter is initialised; values depend only on (seed, name, element coordinates).
enum class InitKind { kNormal, kZeros, kOnes };

struct Parameter {
  std::string name;         // canonical HF name
  Shape global_shape;       // Tessera layout, padded vocabulary included
  ShardSpec shard;
  InitKind init = InitKind::kNormal;
  float init_std = 0.0f;
  bool weight_decay = true; // false for biases and norm weights
  int64_t offset = 0;       // element offset in the flat buffers
  Tensor value;             // compute dtype, this rank's shard
  Tensor grad;              // fp32 view into the flat gradient buffer
  int64_t numel() const { return shape_numel(global_shape); }
};

class ParameterSet {
 public:
  // Declares a parameter; values and grads exist after allocate().
  Parameter& add(std::string name, Shape shape, InitKind init, float init_std, bool weight_decay,
                 ShardSpec shard = {});
  // Allocates the flat compute-dtype value buffer and the fp32 grad buffer (zeroed), binds every
  // parameter's views and initialises values from `seed` (see init_value()).
  void allocate(DType compute_dtype, uint64_t seed);

  Parameter& get(const std::string& name);
  const Parameter& get(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  std::vector<Parameter>& all() { return params_; }
  const std::vector<Parameter>& all() const { return params_; }

  // A (rows, cols) view of the value (or grad) spanning `names`, which must be consecutive in
  // registration order and have the same number of columns: the fused q/k/v or gate/up weight.
  Tensor fused_value(const std::vector<std::string>& names) const;
  Tensor fused_grad(const std::vector<std::string>& names) const;

  Tensor& flat_values() { return values_; }
  Tensor& flat_grads() { return grads_; }
  int64_t numel() const { return numel_; }
  DType compute_dtype() const { return values_.dtype(); }
  void zero_grads() { grads_.zero_(); }

  // The fp32 initial value of element (row, col) of a parameter: a pure function of the seed,
  // the name and the global coordinates, so any sharding initialises identically.
  static float init_value(const Parameter& p, uint64_t seed, int64_t row, int64_t col);
  // Writes p's fp32 initial values (numel elements) with the seed given to allocate().
  void initial_values(const Parameter& p, float* out) const;

 private:
  Tensor fused(const Tensor& flat, const std::vector<std::string>& names) const;
  std::vector<Parameter> params_;
  std::map<std::string, size_t> index_;
  Tensor values_, grads_;
  int64_t numel_ = 0;
  uint64_t seed_ = 0;
};

}  // namespace tessera::model
