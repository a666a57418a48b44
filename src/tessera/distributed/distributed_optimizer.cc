#include "tessera/distributed/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "tessera/core/error.h"
#include "tessera/distributed/sum_scalars.h"

namespace tessera::distributed {

DistributedOptimizer::DistributedOptimizer(
    model::ParameterSet& params, std::unique_ptr<optim::Optimizer> optimizer,
    std::unique_ptr<optim::LRSchedule> schedule, std::unique_ptr<optim::DynamicLossScaler> scaler,
    TensorParallelGrads& tp_grads, DataParallelGrads& dp_grads, Zero3Params* zero3,
    std::shared_ptr<comm::ProcessGroup> world, std::shared_ptr<comm::ProcessGroup> model_group,
    StepPolicy policy)
    : params_(params),
      optimizer_(std::move(optimizer)),
      schedule_(std::move(schedule)),
      scaler_(std::move(scaler)),
      tp_grads_(tp_grads),
      dp_grads_(dp_grads),
      zero3_(zero3),
      world_(std::move(world)),
      model_group_(std::move(model_group)),
      policy_(policy) {}

void DistributedOptimizer::set_experts(std::vector<FlatRange> ranges,
                                       std::shared_ptr<comm::ProcessGroup> expert_model,
                                       bool adds_stage_experts) {
  expert_ranges_ = std::move(ranges);
  expert_model_ = std::move(expert_model);
  adds_stage_experts_ = adds_stage_experts;
  dense_ranges_.clear();
  int64_t at = 0;
  for (const FlatRange& r : expert_ranges_) {
    if (r.begin > at) dense_ranges_.push_back({at, r.begin});
    at = r.end;
  }
  if (params_.numel() > at) dense_ranges_.push_back({at, params_.numel()});
}

void DistributedOptimizer::set_gradient_offload(GradientOffload* offload) {
  TESSERA_CHECK(offload == nullptr || optimizer_->sharded());
  grad_offload_ = offload;
}

void DistributedOptimizer::begin_iteration(int64_t iteration) {
  if (grad_offload_) grad_offload_->begin_iteration(iteration == policy_.inject_overflow_at);
}

double DistributedOptimizer::sum_counted(
    const std::function<double(const std::vector<FlatRange>*)>& local) const {
  // Every element is counted by one rank of the model-parallel group (tensor x pipeline; a tied
  // embedding's copy not at all), and, sharded, by one data-parallel rank.
  if (optimizer_->sharded()) return sum_over(world_.get(), {local(&dp_grads_.owned())})[0];
  if (expert_ranges_.empty()) return sum_over(model_group_.get(), {local(nullptr)})[0];
  // Replicated, with expert parallelism: each rank's experts are its own.
  const double dense = local(&dense_ranges_);
  const double stage_experts = sum_over(expert_model_.get(), {local(&expert_ranges_)})[0];
  return sum_over(model_group_.get(), {dense + (adds_stage_experts_ ? stage_experts : 0.0)})[0];
}

double DistributedOptimizer::params_norm() const {
  return std::sqrt(sum_counted([&](const std::vector<FlatRange>* only) {
    optim::Optimizer::Ranges ranges;
    for (const FlatRange& r : tp_grads_.counted_ranges(only)) ranges.emplace_back(r.begin, r.end);
    return optimizer_->master_sum_squares(ranges);
  }));
}

std::vector<FlatRange> DistributedOptimizer::reported_grad_ranges(bool dense_replica,
                                                                 bool expert_replica) const {
  if (optimizer_->sharded()) return tp_grads_.counted_ranges(&dp_grads_.owned());
  if (expert_ranges_.empty())
    return dense_replica ? tp_grads_.counted_ranges() : std::vector<FlatRange>{};
  std::vector<FlatRange> out;
  if (dense_replica) out = tp_grads_.counted_ranges(&dense_ranges_);
  if (expert_replica)
    for (const FlatRange& r : tp_grads_.counted_ranges(&expert_ranges_)) out.push_back(r);
  std::sort(out.begin(), out.end(),
            [](const FlatRange& x, const FlatRange& y) { return x.begin < y.begin; });
  return out;
}

StepResult DistributedOptimizer::step(int64_t iteration, double loss_sum, double tokens,
                                      double global_tokens, int64_t schedule_increment) {
  StepResult out;
  const double loss_scale = scaler_->scale();
  // Sharded: this rank holds reduced gradients for its part only, and the norm sums the parts
  // over every rank; replicated: every DP rank holds all of them, the norm sums over TP.
  const bool sharded = optimizer_->sharded();
  const auto* owned = sharded ? &dp_grads_.owned() : nullptr;
  tp_grads_.finalize(owned);
  Tensor& grads = params_.flat_grads();
  // With the gradients offloaded, what is still in memory is stored now; the norm's terms were
  // taken as they left.
  if (grad_offload_) {
    grad_offload_->before_step();
  } else if (iteration == policy_.inject_overflow_at) {
    grads.data<float>()[0] = INFINITY;
  }
  const double sum_sq = sum_counted([&](const std::vector<FlatRange>* only) {
    return grad_offload_ ? grad_offload_->local_sum_squares() : tp_grads_.local_sum_squares(only);
  });
  if (policy_.count_zeros_in_grad)
    out.num_zeros = sum_counted([&](const std::vector<FlatRange>* only) {
      if (grad_offload_) return grad_offload_->local_zeros();
      double zeros = 0;
      for (const FlatRange& r : tp_grads_.counted_ranges(only))
        zeros += count_zeros(grads.data<float>() + r.begin, r.size());
      return zeros;
    });
  const bool finite = std::isfinite(sum_sq) && std::isfinite(loss_sum);
  // The gradients are of loss_sum / global_tokens. With a loss mask (--eod-mask-loss) fewer
  // tokens count: rescale to the mean over the counted tokens of the global batch (Megatron's
  // --calculate-per-token-loss, independent of the micro-batch size). Exactly 1 without a mask.
  const double count_ratio = tokens > 0 ? global_tokens / tokens : 1.0;
  out.grad_norm = std::sqrt(sum_sq) / loss_scale * count_ratio;

  if (!finite) {
    if (policy_.fp16) {
      try {
        scaler_->update(true);  // throws at the minimum scale
      } catch (const Error& e) {
        throw Error("iteration " + std::to_string(iteration) + ": " + e.what());
      }
      out.skipped = true;
      return out;
    }
    out.nan = true;
    if (!policy_.skip_nan_iterations)
      throw Error("iteration " + std::to_string(iteration) + ": loss or gradients are NaN/Inf " +
                  "(lm loss " + std::to_string(loss_sum / tokens) +
                  "); weights left untouched; pass --skip-nan-iterations to skip such iterations");
    out.skipped = true;
    return out;
  }
  scaler_->update(false);
  float step_scale = static_cast<float>(count_ratio / loss_scale);
  // Megatron's clipping: scale by max_norm / (norm + 1e-6) when that is below 1.
  if (policy_.clip_grad > 0) {
    const double coeff = policy_.clip_grad / (out.grad_norm + 1e-6);
    if (coeff < 1.0) step_scale *= static_cast<float>(coeff);
  }
  if (zero3_) zero3_->quiesce();
  if (const auto betas = schedule_->betas_at(schedule_position_))
    optimizer_->set_betas(betas->first, betas->second);
  last_lr_ = schedule_->lr_at(schedule_position_);
  // ZeRO 3 with parameter offload writes each owned part out as soon as the step has passed it.
  const auto updated_through = [&](int64_t flat_end) { zero3_->updated_through(flat_end); };
  optimizer_->step(last_lr_, step_scale, schedule_->decoupled_lr_at(schedule_position_),
                   zero3_ ? std::function<void(int64_t)>(updated_through) : nullptr);
  schedule_position_ += schedule_increment;
  dp_grads_.gather_values();  // ZeRO 1-2: every rank's parameters whole again
  if (zero3_) zero3_->after_step();
  return out;
}

void DistributedOptimizer::refresh_values() {
  // As around a step: nothing gathered or read ahead survives the new values.
  if (zero3_) zero3_->quiesce();
  optimizer_->refresh_compute_values();
  // Every rank's parameters whole again, as after a step (ZeRO 1-2 gather, ZeRO 3 re-gathers
  // its persistent units).
  dp_grads_.gather_values();
  if (zero3_) zero3_->after_step();
}

void DistributedOptimizer::set_scaler_state(const optim::LossScalerState& state) {
  scaler_ = std::make_unique<optim::DynamicLossScaler>(state);
}

}  // namespace tessera::distributed
