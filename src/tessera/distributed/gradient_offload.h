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
// the update are bitwise those of the run in memory. Ranges whose gradients still change after
// the reduction (`late`: the tensor-parallel completion of sequence-parallel and replicated
// key/value gradients, the tied embedding's sum over the pipeline) are held back: an owned range
// touching one is stored by before_step(), after those changes.
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
  // Owned ranges stored when they became final (the rest waited for before_step()).
  int64_t parts_stored_early() const { return stored_early_; }

 private:
  void store(size_t part);

  model::ParameterSet& params_;
  optim::StateStorage& storage_;
  std::vector<FlatRange> owned_, counted_;
  bool count_zeros_;
  std::vector<int64_t> packed_;                 // packed index of each owned range's start
  std::vector<size_t> first_counted_;           // per owned range: its first counted range
  std::vector<char> late_;                      // per owned range: touches a late range
  std::vector<char> stored_;                    // per owned range, this iteration
  std::vector<double> squares_, zeros_;         // per counted range
  bool plant_overflow_ = false;
  int64_t stored_early_ = 0;
};

}  // namespace tessera::distributed
