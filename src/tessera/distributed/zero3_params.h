// ZeRO stage 3 parameters (DeepSpeed's stage 3, PyTorch FSDP's FULL_SHARD): each data-parallel
// rank keeps only its part of every model unit's parameters (part d of each unit, the same
// parts whose gradients and optimizer state it owns, distributed/data_parallel_grads.h); a unit
// is all-gathered just before the model uses it (GPTModel's acquire/release calls, forward and
// again in backward) and its other parts are dropped after: zeroed, their pages given back.
//
// Prefetch (DeepSpeed's stage3_prefetch_bucket_size): when the model acquires the unit its pass
// expects next (the model's ChunkRunner announces each pass's units, model/param_access.h
// ParamAccess), the units after it in the pass are gathered on the communication thread while the
// current one computes, in order, as long as the units gathered ahead and not yet in use total at
// most `prefetch_elems` elements. Live limit (stage3_max_live_parameters): no gather, prefetch or
// not, takes the gathered units above `max_live_elems`; an acquisition that would drops prefetched
// units first (units in use stay: a recompute group may need several at once, whatever the limit).
// A limit below the persistent units plus the largest other unit is refused at construction
// (tessera:: Error). Units smaller than `persistence_threshold` elements
// (stage3_param_persistence_threshold) stay whole: they are gathered once after each optimizer
// step (after_step()) instead of around every use. The three sizes come from the ShardingPlan.
//
// Parameter offload (ZeRO-Infinity's offload_param): with a PartSwap (part_swap.h; on NVMe,
// offload/param_swap.h) the owned parts of the sharded units live outside memory between uses.
// A unit's owned part is read back before its gather (its read started ahead along the pass, as
// far as the swap's buffers allow, so that it overlaps the compute of the units before it), and
// dropped with the rest of the unit after use (the store still holds it). The optimizer step
// writes every owned part into the buffer, in flat order; updated_through() writes each part out
// and gives its pages back as soon as the step has passed it, after_step() the rest. Units are then
// persistent by the threshold only, so a run at DP 1 (where each unit's part is the whole unit)
// offloads too.
#pragma once

#include <memory>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/distributed/part_swap.h"
#include "tessera/distributed/sharding_plan.h"
#include "tessera/model/param_access.h"

namespace tessera::distributed {

// Whether a unit of `elems` elements sharded `parts` ways stays whole between uses: in one part
// there is nothing to shard (unless it is offloaded: then the part, the whole unit, goes to
// disk), and below the threshold a gather per use costs more than the memory it saves.
bool persistent_unit(int64_t elems, int parts, int64_t persistence_threshold, bool offload);
// The least a step needs live is the persistent units and the largest other one in use:
// tessera::Error (naming --stage3-max-live-parameters) when `max_live_elems` is below it.
void require_live_limit(int64_t max_live_elems, int64_t persistent_elems, int64_t largest);

class Zero3Params : public model::ParamAccess {
 public:
  // Collective over `dp`. `units`: the model's unit ranges (each a multiple of DP). Drops the
  // unowned parts of every non-persistent unit at once (nothing to give back when the model was
  // built with resident_ranges()).
  // The plan's persistence_threshold, prefetch_elems and max_live_elems apply.
  // `expert` (empty, or one flag per unit): units of MoE experts held by an expert-data-parallel
  // group (`expert_dp`, collective over it too) rather than the data-parallel one: sharded,
  // gathered and kept persistent over that group, as DataParallelGrads shards their gradients
  // and optimizer state.
  // `swap` (nullptr: none; it must outlive this, initialised here): parameter offload. The owned
  // parts of the non-persistent units are handed to it, written out and released at once.
  Zero3Params(model::ParameterSet& params, std::shared_ptr<comm::ProcessGroup> dp,
              std::vector<FlatRange> units, const ShardingPlan& plan,
              std::shared_ptr<comm::ProcessGroup> expert_dp = nullptr,
              std::vector<bool> expert = {}, PartSwap* swap = nullptr);
  ~Zero3Params() override;

  void begin_pass(const std::vector<int>& order) override;
  void acquire(int unit) override;
  void release(int unit) override;
  // Before the optimizer writes the owned parts: waits for any gather still in flight and drops
  // every unit nobody holds, so no stale copy of an unowned part survives the step; with
  // offload, cancels the parameter reads ahead (they would bring back the old values).
  void quiesce();
  // During the step, as the optimizer has updated every owned element below `flat_end`: with
  // offload, writes the swapped parts that end there out and releases them, so the step never
  // holds the whole shard (after_step() writes the rest).
  void updated_through(int64_t flat_end) {
    if (swap_) swap_->write_out_through(flat_end);
  }
  // After the optimizer updated the owned parts (every one of them: a step, or the values of
  // loaded master weights), with quiesce() before: with offload, writes out and releases the
  // swapped parts updated_through() has not, and waits for every write; then re-gathers the
  // persistent units. Collective.
  void after_step();

  // What rank dp_rank of dp_size keeps resident between uses: the whole of every unit smaller
  // than `persistence_threshold` (or every unit at DP 1, where part 0 is the whole unit too:
  // the same ranges with parameter offload, whose owned parts go to disk later), part dp_rank of
  // the others; for the units flagged in `expert` (empty: none) the same over the expert-DP
  // group (edp_size, edp_rank). For building the model with only these initialised (GPTModel's
  // `resident`).
  static std::vector<std::pair<int64_t, int64_t>> resident_ranges(
      const std::vector<std::pair<int64_t, int64_t>>& units, int dp_size, int dp_rank,
      int64_t persistence_threshold, const std::vector<bool>& expert = {}, int edp_size = 1,
      int edp_rank = 0);

  // Elements of the units gathered right now (persistent ones included).
  int64_t live_elems() const;
  // Elements of unit u this rank keeps between uses: all of a persistent unit, else its part
  // (in memory, or with parameter offload possibly on disk).
  int64_t kept_elems(int unit) const {
    return persistent_[unit] ? units_[unit].size() : owned_part(unit).size();
  }

 private:
  enum class State { kDropped, kGathering, kWhole };
  // Whether unit u was gathered (or is gathering) ahead of use: live, not persistent, not in use.
  bool prefetched(int unit) const;
  int64_t prefetched_elems() const;
  // Drops prefetched units (those of another pass first, then this pass's from its far end)
  // until `elems` more fit the live limit.
  void make_room(int64_t elems);
  // Starts gathering unit u (its owned part read back first, with offload; over a group of
  // one the unit is whole at once).
  void start_gather(int unit);
  void wait_gather(int unit);
  // Drops the unowned parts of unit u (and, with offload, its owned part: the store has it).
  void drop(int unit);
  // Offload: starts reading the owned parts of the pass's next dropped units, in order, while
  // the swap has free buffers.
  void read_ahead();
  // The group unit u is sharded over (nullptr: one rank), and its size and rank.
  comm::ProcessGroup* group_of(int unit) const { return (expert_[unit] ? expert_dp_ : dp_).get(); }
  int size_of(int unit) const { return group_of(unit) ? group_of(unit)->size() : 1; }
  FlatRange owned_part(int unit) const {
    return part_of(units_[unit], size_of(unit), group_of(unit) ? group_of(unit)->rank() : 0);
  }

  model::ParameterSet& params_;
  std::shared_ptr<comm::ProcessGroup> dp_, expert_dp_;
  std::vector<FlatRange> units_;
  std::vector<bool> persistent_;
  std::vector<bool> expert_;  // sharded over expert_dp_
  std::vector<State> state_;
  std::vector<int> uses_;
  std::vector<comm::Work> work_;
  std::vector<Tensor> send_;  // the owned part being sent by an in-flight gather
  int64_t prefetch_elems_, max_live_elems_;
  std::vector<int> order_;    // the units the current pass acquires, in order (a copy)
  size_t next_in_order_ = 0;  // the index in order_ of the next one
  PartSwap* swap_;            // parameter offload, or nullptr
};

}  // namespace tessera::distributed
