// The fp32 gradients of a rank's partition moved out of memory at the accumulation boundary, as
// DeepSpeed's ZeRO-Infinity does with offload_optimizer on NVMe (stage 3's partition_grads
// writes each reduced partition to the optimizer's swap as it comes): the optimizer's state
// storage holds them (optim::StateStorage::holds_gradients(), offload/nvme_state_storage.h) and
// gives them back beside the state, sub-group by sub-group, in the step.
//
// Contract: in the last micro-batch of an iteration DataParallelGrads reports each owned range
// once its reduced gradients are final (part_final()); the range is then stored and its pages
// handed back, so the owned gradients are in memory only between backward writing a bucket and
// its reduction. What the step needs of them before the update is taken on the way: each counted
// range's sum of squares (and zeros), in the same calls on the same values as
// TensorParallelGrads::local_sum_squares(), summed in the same order, so the norm, clipping and
// the update are bitwise those of the run in memory. Gradients that still change after the
// reduction (`late`: the tensor-parallel completion of sequence-parallel and replicated key/value
// gradients, the tied embedding's sum over the pipeline) are held back: the late ranges and the
// counted ranges touching them (whose terms need the changed values) stay in memory until
// before_step() and are stored then, after those changes (announced to the storage as coming
// later: StateStorage::defer_gradients()); the rest of their owned range leaves as usual.
// TensorParallelGrads keeps the ranges finalize() changes apart in its counted ranges, so what
// is held under sequence parallelism is a layer's norm weights and biases, not the layer.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/model/parameter.h"
#include "tessera/optim/state_storage.h"

namespace tessera::distributed {

// Elements of x[0, n) that are exactly zero (either sign), as a double (Megatron's
// --log-num-zeros-in-grad counts).
double count_zeros(const float* x, int64_t n);

class GradientOffload {
 public:
  // `owned`: the rank's owned ranges (DataParallelGrads::owned(): increasing; the optimizer's
  // packed order). `counted`: the ranges this rank adds to the norm, each inside one owned range
  // (TensorParallelGrads::counted_ranges(&owned)). `late`: see above (any order). `storage`
  // must hold gradients; it and `params` must outlive this.
  GradientOffload(model::ParameterSet& params, optim::StateStorage& storage,
                  std::vector<FlatRange> owned, std::vector<FlatRange> counted,
                  const std::vector<FlatRange>& late, bool count_zeros);

  // A new iteration. `plant_overflow` (test hook, StepPolicy::inject_overflow_at): flat element
  // 0's gradient becomes +Inf before the norm, as the step does to gradients in memory.
  void begin_iteration(bool plant_overflow);
  // The owned range `part` holds its final gradients of this iteration.
  void part_final(const FlatRange& part);
  // After the late changes, before the norm: stores what is left; returns once all is stored.
  void before_step();

  // This rank's squared gradient norm and zero count over the counted ranges (after
  // before_step()): TensorParallelGrads::local_sum_squares(&owned)'s value, bit for bit.
  double local_sum_squares() const;
  double local_zeros() const;
  // Owned ranges handed over when they became final (the rest waited for before_step()), and
  // the elements held back in memory until the step.
  int64_t parts_stored_early() const { return stored_early_; }
  int64_t held_elements() const;

 private:
  // Part i's pieces that are not held: norm terms taken, stored, pages given back; the held
  // ones announced for later.
  void store_early(size_t part);
  // Part i's held pieces, after the late changes.
  void store_held(size_t part);
  // The norm terms of part i's counted ranges that are held (or not).
  void take_terms(size_t part, bool held);

  model::ParameterSet& params_;
  optim::StateStorage& storage_;
  std::vector<FlatRange> owned_, counted_;
  bool count_zeros_;
  std::vector<int64_t> packed_;                 // packed index of each owned range's start
  std::vector<size_t> first_counted_;           // per owned range: its first counted range
  std::vector<std::vector<FlatRange>> held_;    // per owned range: pieces held to the step
  std::vector<char> counted_held_;              // per counted range: it is held
  std::vector<char> stored_;                    // per owned range, this iteration
  std::vector<double> squares_, zeros_;         // per counted range
  bool plant_overflow_ = false;
  int64_t stored_early_ = 0;
};

}  // namespace tessera::distributed
