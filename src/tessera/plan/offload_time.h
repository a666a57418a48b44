// NVMe optimizer offload in the step-time model: the optimizer state's swapper
// (offload/nvme_state_storage.h) and the gradients' writes at the accumulation boundary
// (distributed/gradient_offload.h) replayed on a model of the device, one queue served in the
// order requests are issued at the machine's measured read and write rates (plan/machine.h
// StorageRates).
//
// One iteration, as the trainer runs it:
//   - at its start, prefetch() reads the state of the first sub-groups (up to buffers - 1, none
//     whose write from the last step is still in flight) while the model computes;
//   - in the last micro-batch's backward the owned fp32 gradients are written (4 bytes an
//     element) as their buckets' reductions complete, the step waiting for the last of them
//     before it visits the state;
//   - the step visits sub-group i: its state (unless prefetched) and its gradients are read, the
//     update runs (its share of AdamW's compute time), the state is written back. With
//     pipeline_read the next sub-groups are read ahead into free buffers (a buffer is free once
//     its write completed); without pipeline_write each write is waited for before going on.
//     Writes still in flight when the step ends overlap the next iteration (its prefetch and
//     forward), as they do in the trainer.
// Three iterations are replayed and the last is reported, so the writes a step leaves behind
// weigh on the next one as in a steady run.
//
// ZeRO 3 parameter offload (offload/param_swap.h under distributed/zero3_params.h), one pass
// (forward or backward) at a time: at each unit's acquisition in pass order, the reads of the
// next units' parts start as far as the buffers allow (a buffer a piece of at most buffer_size
// elements; a unit's read that finds no buffer free cancels the furthest read ahead, which is
// issued again later), then the units within the prefetch window (stage3_prefetch_bucket_size
// elements of gathered, unused units) are gathered, each waiting for its part's read (piece by
// piece, each piece's buffer freed as it arrives), the reads ahead go on into the buffers that
// freed; then the unit computes. The optimizer step writes every swapped part once and waits for
// the writes.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tessera/plan/machine.h"

namespace tessera::plan {

// What the swapper moves and how (train::RankLayout's optimizer_offload_* fields).
struct OptimizerSwapShape {
  double owned_elements = 0;  // n: the rank's elements of the optimizer state
  int arrays = 0;             // fp32 arrays an element in the swap file (master, moments)
  double sub_group = 0;       // elements a sub-group (the swap unit)
  int buffers = 0;            // sub-groups in memory at once (>= 2)
  bool pipeline_read = false, pipeline_write = false;
};

// The iteration around the step, in seconds from its start.
struct IterationTimes {
  // The owned gradients' writes, in the order they are issued: (when, bytes), as the last
  // micro-batch's buckets complete their reduction.
  std::vector<std::pair<double, double>> gradient_writes;
  double optimizer_start = 0;  // the optimizer step begins (schedule and reduction done)
  double update = 0;           // AdamW over all n elements, compute alone
};

struct OptimizerSwapTimes {
  double boundary_wait = 0;  // the step waiting for the gradients' writes (and the prefetch)
  double visit = 0;          // the step's visit: reads, updates, writes, as the step sees them
  double update = 0;         // of it, the update's compute (IterationTimes::update)
  double read_bytes = 0, write_bytes = 0;  // an iteration's
  // The I/O's share of the step: what it adds to the update alone.
  double exposed() const { return boundary_wait + visit - update; }
};

// tessera::Error (one line) when `rates` are not described.
OptimizerSwapTimes simulate_optimizer_swap(const OptimizerSwapShape& shape,
                                           const IterationTimes& iteration,
                                           const StorageRates& rates);

// A unit of a pass in the order the pass uses it: the bytes of its part on NVMe (0: not swapped,
// kept in memory by max_in_cpu), its elements as ZeRO 3 counts them for the prefetch window
// (0: persistent, never dropped), and the compute that uses it.
struct SwappedUnit {
  double bytes = 0, elements = 0, compute = 0;
};

struct ParamSwapShape {
  double piece_bytes = 0;  // buffer_size elements of the compute dtype
  int buffers = 0;         // >= 2
  double window = 0;       // the prefetch window, elements
};

// Seconds the pass waits for reads beyond its compute (the pass starting with every unit
// dropped and no read in flight).
double simulate_param_pass(const std::vector<SwappedUnit>& pass, const ParamSwapShape& shape,
                           const StorageRates& rates);

}  // namespace tessera::plan
