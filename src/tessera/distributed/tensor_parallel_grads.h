// Completing a tensor-parallel rank's gradients, and their global norm.
//
// After the backward passes of an iteration each rank's flat gradient buffer holds:
//   - split parameters (column/row weights, vocab rows): the exact gradient of its shard;
//   - replicated parameters (norms, row-parallel biases, position embedding): the full gradient,
//     identical on every rank, or, under --sequence-parallel, only the part from this rank's
//     slice of the sequence (except those marked Parameter::tp_complete: whole everywhere);
//   - key/value heads replicated because there are fewer query groups than ranks: the part from
//     this rank's query heads only.
// finalize() sums the partial ones (over TP for the sequence-parallel case, over each replica
// group for the key/value heads), so every rank's gradients equal the single-process
// gradients restricted to its shard. sum_squares() then counts every global element once (a
// replicated element on one rank only) and sums over TP, so the norm and clipping match the
// single-process run.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/model/parameter.h"
#include "tessera/parallel/tensor_parallel.h"

namespace tessera::distributed {

class TensorParallelGrads {
 public:
  // Collective over tp's group (creates the replica groups it needs). `params` must outlive this.
  // `apart`: flat ranges whose gradients something else changes after the reduction (the tied
  // embedding's sum between the pipeline's ends): the parameters inside them get norm terms of
  // their own, as those finalize() changes do (see counted_ranges()).
  TensorParallelGrads(model::ParameterSet& params, const parallel::TensorParallel& tp,
                      const std::vector<FlatRange>& apart = {});

  // Sums the partial gradients (see above). Collective; a no-op when TP is 1. With `only`, just
  // the elements in those flat ranges (a ZeRO shard: the only reduced gradients this rank has;
  // every TP rank passes the same ranges, as their flat layouts are equal).
  void finalize(const std::vector<FlatRange>* only = nullptr);
  // This rank's part of the squared global gradient norm: the elements it counts (every global
  // element is counted by exactly one TP rank), restricted to `only` when given. Local.
  double local_sum_squares(const std::vector<FlatRange>* only = nullptr) const;
  // The flat ranges this rank counts (every global element by exactly one TP rank), restricted
  // to `only` when given; neighbouring parameters' ranges merged, except those finalize()
  // changes and those in `apart`, which stay ranges of their own: where it sums anything else taken
  // once per global element (the parameter norm, the gradient's zeros).
  std::vector<FlatRange> counted_ranges(const std::vector<FlatRange>* only = nullptr) const;
  // The flat ranges finalize() changes (empty when TP is 1): gradients not final until then.
  std::vector<FlatRange> finalized_ranges() const;
  // The squared norm of the global gradient (after finalize()), summed over TP; identical on
  // every TP rank. Collective.
  double sum_squares() const;

 private:
  // Gathers `ranges` of the flat grads into one buffer, all-reduces it over `group`, scatters back.
  void all_reduce_ranges(const std::vector<FlatRange>& ranges, comm::ProcessGroup& group);

  model::ParameterSet& params_;
  parallel::TensorParallel tp_;
  std::vector<FlatRange> sequence_parallel_;          // replicated params under SP
  std::map<int, std::vector<FlatRange>> replicated_;  // by replica-group size: replicated KV rows
  std::map<int, std::shared_ptr<comm::ProcessGroup>> replica_groups_;
  std::vector<FlatRange> norm_ranges_;  // what this rank counts in the norm
};

}  // namespace tessera::distributed
