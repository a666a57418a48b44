// Parameters and the flat buffers that hold them.
//
// Every Parameter is one tensor of the Hugging Face checkpoint of its model family (canonical
// name, e.g. "model.layers.3.mlp.up_proj.weight"), with its *global* shape in Tessera's layout
// (linear weights are (out, in) like torch.nn.Linear; exporters transpose GPT-2's Conv1D). A
// rank holds its tensor-parallel shard of it (shard.h; the whole tensor when TP is 1). The
// shard's compute-dtype value and fp32 gradient are views into two flat buffers owned by the
// ParameterSet, in registration order, so the optimizer steps one contiguous range and
// consecutive parameters can be fused into one GEMM (q/k/v, gate/up) through a spanning view:
// a rank's q, k and v shards are consecutive, so its fused QKV is its heads' rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/model/shard.h"

namespace tessera::model {

// How a parameter is initialised; values depend only on (seed, name, element coordinates).
enum class InitKind { kNormal, kZeros, kOnes };

struct Parameter {
  std::string name;    // canonical HF name
  Shape global_shape;  // Tessera layout, padded vocabulary included
  ShardSpec shard;
  Shape local_shape;               // this rank's shard (= global_shape when TP is 1 or replicated)
  std::vector<ShardPiece> pieces;  // where the shard sits in the global tensor (shard.h)
  InitKind init = InitKind::kNormal;
  float init_std = 0.0f;
  bool weight_decay = true;  // false for biases and norm weights
  // The word embedding and the output layer (Megatron's is_embedding_or_output_parameter): they
  // take --decoupled-lr when it is given.
  bool embedding_or_output = false;
  // A second copy of a parameter another pipeline stage owns (the tied word embedding as the
  // last stage's output layer): same name and initial values, gradients summed with the
  // original's over the embedding group; counted once (by the original) in norms and exports.
  bool tied_copy = false;
  // An MoE expert's parameter under expert parallelism: this rank holds it with the other ranks
  // of its expert-data-parallel group (not the whole data-parallel group), which reduce its
  // gradient and shard its optimizer state (model/moe_layer.h).
  bool expert = false;
  // A replicated parameter whose gradient every tensor-parallel rank computes whole even under
  // --sequence-parallel (an MoE block runs on the gathered sequence: its router and its experts'
  // and shared expert's replicated biases), so it is not summed over TP like the norms.
  bool tp_complete = false;
  // Not split over TP, yet not a TP replica either: an MoE expert under expert tensor parallelism
  // 1, whose copies are governed by the expert grid (different experts on different TP ranks
  // when EP spans them, or expert-data-parallel copies, whose parts the norm and the checkpoint
  // split over the expert-DP group). Counted on every TP rank (norms, checkpoints), never
  // reduced over TP.
  bool tp_distinct = false;
  int64_t offset = 0;  // element offset of the shard in the flat buffers
  Tensor value;        // compute dtype, this rank's shard
  Tensor grad;         // fp32 view into the flat gradient buffer
  int64_t numel() const { return shape_numel(local_shape); }  // of the shard
  int64_t global_numel() const { return shape_numel(global_shape); }
  // The global index along shard.tp_dim of local index `i` along it (i itself when replicated).
  int64_t global_index(int64_t i) const;
};

class ParameterSet {
 public:
  // The parameters as held by rank `tp_rank` of a tensor-parallel group of `tp_size`.
  explicit ParameterSet(int tp_size = 1, int tp_rank = 0) : tp_size_(tp_size), tp_rank_(tp_rank) {}
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }

  // Pads the flat buffers with zeros up to a multiple of `multiple` elements at this point of
  // the declarations (so a group of parameters can start and end on a shard boundary).
  void pad_to(int64_t multiple);
  // Declares a parameter (its global shape; the shard is derived from `shard`); values and
  // grads exist after allocate().
  Parameter& add(std::string name, Shape shape, InitKind init, float init_std, bool weight_decay,
                 ShardSpec shard = {});
  // Allocates the flat compute-dtype value buffer and the fp32 grad buffer (zeroed), binds every
  // parameter's views and initialises values from `seed` (see init_value()). Both buffers are
  // padded with zeros to a multiple of `multiple` elements (data-parallel sharding splits them
  // into equal parts); the padding belongs to no parameter. With `materialize` (increasing flat
  // ranges) only the values inside those ranges are initialised; the rest read as zero but are
  // never touched, so their pages are not resident (ZeRO 3 builds only its own parts, as
  // DeepSpeed's zero.Init). The zeroed gradients are not resident either until written.
  void allocate(DType compute_dtype, uint64_t seed, int64_t multiple = 1,
                const std::vector<std::pair<int64_t, int64_t>>* materialize = nullptr);

  Parameter& get(const std::string& name);
  const Parameter& get(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  std::vector<Parameter>& all() { return params_; }
  const std::vector<Parameter>& all() const { return params_; }
  // Calls fn(param, begin, end, k) for every run [begin, end) where range k of `ranges` (flat
  // [first, second), increasing and disjoint) meets a parameter, in offset order: one merge pass
  // (the parameters are in offset order too).
  template <typename Fn>
  void for_each_run(const std::vector<std::pair<int64_t, int64_t>>& ranges, Fn&& fn) const {
    size_t r = 0;
    for (const Parameter& p : params_) {
      const int64_t begin = p.offset, end = p.offset + p.numel();
      while (r < ranges.size() && ranges[r].second <= begin) ++r;
      for (size_t k = r; k < ranges.size() && ranges[k].first < end; ++k) {
        const int64_t lo = std::max(begin, ranges[k].first), hi = std::min(end, ranges[k].second);
        if (lo < hi) fn(p, lo, hi, k);
      }
    }
  }

  // A (rows, cols) view of the value (or grad) spanning `names`, which must be consecutive in
  // registration order and have the same number of columns: the fused q/k/v or gate/up weight.
  Tensor fused_value(const std::vector<std::string>& names) const;
  Tensor fused_grad(const std::vector<std::string>& names) const;

  Tensor& flat_values() { return values_; }
  const Tensor& flat_values() const { return values_; }
  Tensor& flat_grads() { return grads_; }
  int64_t numel() const { return numel_; }  // of the flat buffers, padding included
  DType compute_dtype() const { return values_.dtype(); }
  void zero_grads() { grads_.zero_(); }

  // The fp32 initial value of element (row, col) of a parameter's *global* tensor (a vector is
  // one row): a pure function of the seed, the name and the global coordinates, so any
  // sharding initialises identically.
  static float init_value(const Parameter& p, uint64_t seed, int64_t row, int64_t col);
  // Writes the fp32 initial values of elements [lo, hi) of p's shard (local row-major order;
  // hi < 0: to numel()) to out[0 .. hi - lo), with the seed given to allocate(). Each value is
  // the same whatever range it is written with.
  void initial_values(const Parameter& p, float* out, int64_t lo = 0, int64_t hi = -1) const;

 private:
  Tensor fused(const Tensor& flat, const std::vector<std::string>& names) const;
  std::vector<Parameter> params_;
  std::map<std::string, size_t> index_;
  Tensor values_, grads_;
  int64_t numel_ = 0;
  uint64_t seed_ = 0;
  int tp_size_ = 1, tp_rank_ = 0;
};

}  // namespace tessera::model
