// Trainer::report_memory: the memory report of the first iteration (train/memory_report.h), the
// theory of this rank's layout beside what it holds, gathered to rank 0, which prints it for the
// rank with the largest measured total.
#include <sys/resource.h>

#include <cstdio>

#include "tessera/core/memory.h"
#include "tessera/core/threads.h"
#include "tessera/distributed/sum_scalars.h"
#include "tessera/train/memory_report.h"
#include "tessera/train/rank_layout.h"
#include "tessera/train/sharding.h"
#include "tessera/train/trainer.h"

namespace tessera::train {

void Trainer::report_memory() {
  const distributed::ShardingPlan sharding = sharding_plan(args_, dp_size_);
  RankLayout r;
  r.tp = tp_.size();
  r.dp = dp_size_;
  r.ep = ep_size_;
  r.expert_tp = experts_whole_ ? 1 : tp_.size();
  r.expert_dp = edp_size_;
  r.first_stage = model_->chunk_shape(0).embeds;
  r.last_stage = model_->chunk_shape(model_->num_chunks() - 1).head;
  r.experts_whole = experts_whole_;
  for (int chunk = 0; chunk < model_->num_chunks(); ++chunk) {
    const model::GPTModel::ChunkShape c = model_->chunk_shape(chunk);
    r.chunk_layers.emplace_back();
    for (int l = c.first; l < c.end; ++l) {
      r.layers.push_back(model_->global_layer(chunk, l));
      r.chunk_layers.back().push_back(r.layers.back());
    }
  }
  r.pp = pp_size_;
  r.pp_rank = pp_rank_;
  if (executor_) r.schedule = executor_->kind();
  r.micro_batches = current_batch_ / (args_.micro_batch_size * data_size_);
  r.tokens = args_.micro_batch_size * args_.model.seq_length / cp_size_;
  r.micro_batch_size = args_.micro_batch_size;
  r.sequence_parallel = args_.sequence_parallel && tp_.size() > 1;
  r.cp = cp_size_;
  if (cp_size_ > 1) {
    const context::ContextParallel& cp = model_->context_parallel();
    for (int l = 0; l < args_.model.num_layers; ++l) r.cp_types.push_back(cp.type_of(l));
    if (!args_.hierarchical_cp_sizes.empty()) r.cp_a2a = args_.hierarchical_cp_sizes[0];
  }
  r.recompute = runner_->recompute();
  set_reductions(r, sharding, args_);
  if (optimizer_nvme_) r.optimizer_offload_buffer_bytes = optimizer_nvme_->buffer_bytes();
  if (param_swap_) {
    r.param_offload_kept_elements = static_cast<double>(param_swap_->kept_elems());
    r.param_offload_buffer_bytes = static_cast<double>(param_swap_->buffer_bytes());
  }
  r.compute = model_->params().compute_dtype();
  r.sgd = args_.optimizer == "sgd";
  r.threads = num_threads();
  const ModelStateBytes theory = theoretical_model_states(model_->config(), r);

  RankMemory mine;
  mine.theory = {theory.parameters,
                 theory.gradients,
                 theory.optimizer,
                 theoretical_activations(model_->config(), r),
                 theoretical_comm_buffers(model_->config(), r),
                 theoretical_other(model_->config(), r)};
  const MemorySnapshot s = MemoryAccountant::instance().snapshot();
  const auto at = [&](MemoryCategory c) { return static_cast<double>(s.current[int(c)]); };
  const auto peak = [&](MemoryCategory c) { return static_cast<double>(s.peak[int(c)]); };
  model::ParameterSet& params = model_->params();
  mine.measured = {
      static_cast<double>(
          resident_bytes(params.flat_values().raw(), params.flat_values().nbytes())),
      static_cast<double>(resident_bytes(params.flat_grads().raw(), params.flat_grads().nbytes())),
      at(MemoryCategory::kOptimizer),
      peak(MemoryCategory::kActivations),
      peak(MemoryCategory::kComm),
      peak(MemoryCategory::kOther)};
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  mine.peak_rss = usage.ru_maxrss * 1024.0;
  mine.accountant_peak = static_cast<double>(s.total_peak);

  // Every rank's figures to every rank: its slot of a world-sized vector, summed.
  constexpr int kFields = 2 * kReportCategories + 2;
  const int rank = world_ ? world_->rank() : 0;
  std::vector<double> slots(static_cast<size_t>(world_size_) * kFields, 0.0);
  for (int k = 0; k < kReportCategories; ++k) {
    slots[rank * kFields + k] = mine.theory[k];
    slots[rank * kFields + kReportCategories + k] = mine.measured[k];
  }
  slots[rank * kFields + 2 * kReportCategories] = mine.peak_rss;
  slots[rank * kFields + 2 * kReportCategories + 1] = mine.accountant_peak;
  slots = distributed::sum_over(world_.get(), slots);
  if (!reporting_rank_) return;
  int worst = 0;
  RankMemory worst_memory;
  for (int w = 0; w < world_size_; ++w) {
    RankMemory m;
    for (int k = 0; k < kReportCategories; ++k) {
      m.theory[k] = slots[w * kFields + k];
      m.measured[k] = slots[w * kFields + kReportCategories + k];
    }
    m.peak_rss = slots[w * kFields + 2 * kReportCategories];
    m.accountant_peak = slots[w * kFields + 2 * kReportCategories + 1];
    if (w == 0 || m.measured_total() > worst_memory.measured_total()) {
      worst = w;
      worst_memory = m;
    }
  }
  std::printf("%s", format_memory_report(worst_memory, worst, world_size_).c_str());
}

}  // namespace tessera::train
