// DistributedOptimizer: one optimizer step across the tensor-, pipeline- and data-parallel
// groups, in the order of Megatron's DistributedOptimizer.step(): complete the gradients over
// tensor parallelism, check for overflow (a non-finite norm or loss), take the global gradient
// norm, clip, update the parameters this rank owns with the scheduled learning rate, then make
// every rank's parameters whole again (ZeRO 1-2 all-gather, ZeRO 3 re-gathers its persistent
// units). The trainer's iteration is: run the schedule (micro-batches, gradient reduction), then
// step(), then log.
//
// It owns the optimizer, the learning-rate schedule and the loss scaler; it uses the gradient
// reducers the model's backward feeds (DataParallelGrads, TensorParallelGrads) and ZeRO 3's
// parameter access, which must outlive it. Policies: fp16 skips a step whose gradients are not
// finite and backs off the loss scale (DeepSpeed's rule, optim/loss_scaler.h); bf16/fp32 stop
// with a tessera::Error on a non-finite step unless skip_nan_iterations, which skips it and
// reports it as a nan iteration. A skipped step leaves the parameters and
// the optimizer's step count untouched.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/distributed/gradient_offload.h"
#include "tessera/distributed/tensor_parallel_grads.h"
#include "tessera/distributed/zero3_params.h"
#include "tessera/model/parameter.h"
#include "tessera/optim/loss_scaler.h"
#include "tessera/optim/lr_schedule.h"
#include "tessera/optim/optimizer.h"

namespace tessera::distributed {

struct StepPolicy {
  double clip_grad = 0;              // global-norm clipping threshold (0: off), Megatron's rule
  bool fp16 = false;                 // non-finite gradients skip the step (loss-scaler back-off)
  bool skip_nan_iterations = false;  // bf16/fp32: skip a non-finite step instead of stopping
  int64_t inject_overflow_at = -1;   // test hook: an Inf planted in the gradients at that step
  bool count_zeros_in_grad = false;  // StepResult::num_zeros (Megatron's --log-num-zeros-in-grad)
};

// What one step did.
struct StepResult {
  double grad_norm = 0;  // of the global mean-loss gradient (unscaled, before clipping)
  bool skipped = false;  // no update (overflow with fp16, or a NaN step skipped)
  bool nan = false;      // the gradients or the loss were not finite (bf16/fp32)
  // With StepPolicy::count_zeros_in_grad: the global gradient's elements that are exactly zero,
  // each counted once whatever the layout (as its norm); else -1.
  double num_zeros = -1;
};

class DistributedOptimizer {
 public:
  // `params`: the model's parameters, whose flat gradients the step reads. `world` sums the norm
  // of sharded gradients (every rank owns a part); `model_group` (tensor x pipeline) that of
  // replicated ones. Either may be nullptr (one rank).
  DistributedOptimizer(model::ParameterSet& params, std::unique_ptr<optim::Optimizer> optimizer,
                       std::unique_ptr<optim::LRSchedule> schedule,
                       std::unique_ptr<optim::DynamicLossScaler> scaler,
                       TensorParallelGrads& tp_grads, DataParallelGrads& dp_grads,
                       Zero3Params* zero3, std::shared_ptr<comm::ProcessGroup> world,
                       std::shared_ptr<comm::ProcessGroup> model_group, StepPolicy policy);

  // Expert parallelism: this rank's experts' flat ranges and the expert model group (expert
  // tensor x expert parallel, within a pipeline stage: the ranks among which every expert
  // element of the stage is held once; nullptr: one rank). Unsharded (ZeRO 0), the experts' part
  // of the norm is summed over that group, and the model group (TP x PP) then adds it once per
  // stage, from the rank given `adds_stage_experts` (its first TP rank), to the dense part.
  // Every rank of a stage with MoE experts must call this (the others must not).
  void set_experts(std::vector<FlatRange> ranges, std::shared_ptr<comm::ProcessGroup> expert_model,
                   bool adds_stage_experts);

  // The owned gradients leave memory at the accumulation boundary (optimizer state on NVMe):
  // the step takes the norm from `offload` and the gradients from the optimizer's storage. It
  // must outlive this; the optimizer must be sharded.
  void set_gradient_offload(GradientOffload* offload);
  // Before an iteration's micro-batches (the gradient offload's bookkeeping).
  void begin_iteration(int64_t iteration);

  // The factor the backward multiplies the loss by (1 unless fp16).
  double loss_scale() const { return scaler_->scale(); }

  // One step after the gradients of a global batch were accumulated and reduced over DP.
  // `loss_sum` and `tokens` are the global batch's (summed over every rank); `global_tokens` is
  // global batch x sequence length (the gradients are of loss_sum / global_tokens). Collective
  // over the world. `iteration` names the step in errors and the test hook.
  // The schedule's position advances by `schedule_increment` with an applied update: 1 (it
  // counts updates) or the iteration's global batch (a sample-based schedule, Megatron's).
  StepResult step(int64_t iteration, double loss_sum, double tokens, double global_tokens,
                  int64_t schedule_increment = 1);
  // Where the learning-rate schedule stands (updates or samples applied), for checkpoints.
  int64_t schedule_position() const { return schedule_position_; }
  void set_schedule_position(int64_t position) { schedule_position_ = position; }
  // The learning rate of the last update (before any: of the first).
  double last_lr() const { return last_lr_ >= 0 ? last_lr_ : schedule_->lr_at(schedule_position_); }

  // The L2 norm of the global fp32 master weights (Megatron's --log-params-norm): every element
  // counted once, as the gradient norm's. Collective over the world.
  double params_norm() const;
  // The flat gradient ranges this rank holds reduced and is the one rank to report for
  // diagnostics (--dump-numerics): sharded, its shard's counted elements; replicated, the
  // counted elements of the first data-parallel replica (`dense_replica`) and, of the experts,
  // the first expert-data-parallel one (`expert_replica`), else none. Local.
  std::vector<FlatRange> reported_grad_ranges(bool dense_replica, bool expert_replica) const;

  // After master weights were loaded (checkpoint): recompute the model's values from them and
  // make every rank's parameters whole, as after a step. Collective.
  void refresh_values();

  optim::Optimizer& optimizer() { return *optimizer_; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  const optim::LRSchedule& schedule() const { return *schedule_; }
  const optim::DynamicLossScaler& scaler() const { return *scaler_; }
  void set_scaler_state(const optim::LossScalerState& state);

 private:
  // Sums local(only) over the ranks so that every global element is counted once: `only` is the
  // rank's ZeRO shard when the optimizer is sharded (summed over the world), else null (summed
  // over the model group), and with unsharded experts the dense and expert ranges are summed
  // apart (set_experts()). Collective over the world.
  double sum_counted(const std::function<double(const std::vector<FlatRange>*)>& local) const;

  model::ParameterSet& params_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LRSchedule> schedule_;
  int64_t schedule_position_ = 0;
  double last_lr_ = -1;
  std::unique_ptr<optim::DynamicLossScaler> scaler_;
  TensorParallelGrads& tp_grads_;
  DataParallelGrads& dp_grads_;
  Zero3Params* zero3_;
  std::shared_ptr<comm::ProcessGroup> world_, model_group_;
  StepPolicy policy_;
  GradientOffload* grad_offload_ = nullptr;
  std::vector<FlatRange> expert_ranges_, dense_ranges_;  // set_experts()
  std::shared_ptr<comm::ProcessGroup> expert_model_;
  bool adds_stage_experts_ = false;
};

}  // namespace tessera::distributed
