// Runs a pipeline schedule (schedule.h) on one rank: walks its action list, running the model's
// chunk forwards and backwards and moving activations and their gradients between neighbouring
// ranks of the pipeline group with nonblocking point-to-point transfers on the communication
// thread (a receive is posted one compute operation ahead, so it overlaps that compute).
//
// Messages are tagged by (activation or gradient, micro-batch, receiving model chunk), so
// transfers that travel between the same two ranks at once (with interleaving: activations one
// way, gradients the same way) are kept apart whatever order they are received in (tags repeat
// only 16384 micro-batch chunks apart, and equal tags match in order).
//
// Every rank of the pipeline loads every micro-batch (the first stage reads its tokens, the last
// its targets and loss mask): the data are small next to the activations, and the loader stays
// independent of the layout.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/data/micro_batch.h"
#include "tessera/model/chunk_runner.h"
#include "tessera/pipeline/schedule.h"
#include "tessera/pipeline/timeline.h"

namespace tessera::pipeline {

// One micro-batch as a loader hands it over: it owns the arrays the Batch and the context
// (positions, document starts) point into.
struct MicroBatch {
  data::MicroBatch data;
  model::Batch batch;  // views of data's arrays
  model::StepContext ctx;
};
// Loads micro-batch m (0 .. M-1) of this iteration for this rank.
using MicroBatchLoader = std::function<std::unique_ptr<MicroBatch>(int m)>;

class PipelineExecutor {
 public:
  // `pp` is the pipeline group (nullptr: one stage). The runner's model holds this rank's part,
  // its chunks matching shape.virtual_stages; the runner applies its policies (ZeRO 3 access,
  // recomputation, grads-ready hook). validate_schedule() must have accepted the shape.
  PipelineExecutor(model::ChunkRunner& runner, std::shared_ptr<comm::ProcessGroup> pp,
                   ScheduleKind kind, const ScheduleShape& shape);

  // before(m) runs before the backward of micro-batch m when this rank's part is one chunk
  // (V = 1; it may install the runner's grads-ready hook, whose offsets then cover the whole
  // part); after(m) runs once m's backward is done on every chunk of this rank (it may reduce
  // gradients; timed as the gradient-sync phase). Micro-batches finish in increasing order.
  struct BackwardHooks {
    std::function<void(int m)> before, after;
  };

  // One training iteration: forwards and backwards of M micro-batches; parameter gradients
  // accumulate grad_scale * d(loss_sum)/d(param). Returns the loss summed on this rank (zero
  // except on the last stage). `timeline` (may be nullptr) records the phases when recording.
  model::LossSum train(const MicroBatchLoader& load, float grad_scale, const BackwardHooks& hooks,
                       Timeline* timeline);
  // Forward only over `count` micro-batches (evaluation), loaded once each in order 0 .. count-1:
  // the loss summed on the last stage, zero elsewhere. At most P*V sends are in flight per rank.
  model::LossSum evaluate(const MicroBatchLoader& load, int count);

  ScheduleKind kind() const { return kind_; }
  // The micro-batches of the following iterations (a global batch that changes with Megatron's
  // --rampup-batch-size): rebuilds the schedule; validate_schedule() must accept the new shape.
  void set_num_microbatches(int num_microbatches);
  // Test hook: sleep `seconds` inside every forward chunk, timed as forward (a planted straggler
  // for --log-straggler's test).
  void set_forward_delay(double seconds) { forward_delay_ = seconds; }

 private:
  // The tag of the message into local chunk `chunk` of micro-batch m (activation or gradient).
  int tag(bool gradient, int m, int receiving_model_chunk) const;
  Tensor activation_buffer(const model::StepContext& ctx) const;

  model::ChunkRunner& runner_;
  model::GPTModel& model_;
  std::shared_ptr<comm::ProcessGroup> pp_;
  ScheduleKind kind_;
  ScheduleShape shape_;
  int rank_ = 0;
  std::vector<Step> steps_;
  double forward_delay_ = 0;
};

}  // namespace tessera::pipeline
