// The step-time model: one training iteration of a layout, predicted from the work each rank does
// (plan/layer_work.h) priced by a machine description (plan/machine.h), composed through the
// pipeline schedule the executor runs (pipeline/schedule.h's lists, simulated with each rank's
// own chunk times) and the gradient reduction's overlap with backward.
//
// Per rank:
//   schedule  = the pipeline simulation's end for this rank (without a pipeline: M x (F + B)),
//               where F and B are a chunk's kernels plus its tensor-parallel collectives (which
//               wait: nothing overlaps them) and B includes recomputation and, on the last model
//               chunk, the head (which runs when its backward starts);
//   + DP/ZeRO = what the gradient reduction leaves after backward: buckets reduced one after
//               another on the communication thread as backward completes them (each ready when
//               backward has produced its share of the rank's gradients), in the last micro-batch
//               (ZeRO 0-1) or every micro-batch (ZeRO 2-3); ZeRO 3's gathers beyond the compute
//               of the pass they are prefetched under; ZeRO 1-2's gather of updated values;
//   + optimizer = zeroing the gradients, their norm, AdamW over the owned elements;
//   + offload   = with the optimizer state on NVMe, what its I/O adds (plan/offload_time.h: the
//               swapper replayed on the machine's storage rates) and backward's re-faults of the
//               gradient pages given back at the boundary; with ZeRO 3's parameters on NVMe, the
//               passes' waits for their parts' reads, their pages' re-faults and the step's
//               writes the update does not hide.
// The step is the largest rank's (the gradient norm's all-reduce ends every rank's step together).
//
// Not modelled (predict_step_time refuses with one line): context parallelism, MoE layers,
// parameter offload to NVMe under a pipeline.
#pragma once

#include <string>
#include <vector>

#include "tessera/comm/parallel_state.h"
#include "tessera/model/config.h"
#include "tessera/plan/machine.h"
#include "tessera/plan/offload_time.h"
#include "tessera/train/memory_report.h"

namespace tessera::plan {

// Seconds of one iteration on one rank, by component (they add up to its step time).
struct StepTimeComponents {
  double compute = 0;          // kernels: forward, backward, recomputation, every micro-batch
  // The collectives inside the layers the kernels wait for: tensor parallelism's and context
  // parallelism's (a ring's transfers less what its attention blocks hide).
  double tp_comm = 0;
  double pipeline_bubble = 0;  // waiting inside the pipeline schedule (fill, drain, transfers)
  double dp_comm = 0;          // gradient reduction and ZeRO gathers not hidden by compute
  double optimizer = 0;        // gradient zeroing, norm, AdamW
  double offload_io = 0;       // NVMe offload's I/O the step waits for (plan/offload_time.h)
  // Of compute: the linear layers' products (the gemm_* kernel kinds), what tessera-train's
  // metrics file reports measured as gemm_s (kernels::gemm_seconds). Not a further component.
  double compute_gemm = 0;
  double total() const {
    return compute + tp_comm + pipeline_bubble + dp_comm + optimizer + offload_io;
  }
};

struct StepTimePrediction {
  double step_s = 0;
  int critical_rank = 0;  // the rank whose step is longest; components are its
  StepTimeComponents components;
  std::vector<StepTimeComponents> ranks;  // every rank's
  std::vector<OptimizerSwapTimes> optimizer_swap;  // every rank's NVMe optimizer offload (or zeros)
  std::vector<double> param_swap_s;       // every rank's ZeRO 3 parameter offload seconds (or 0)
  int ranks_per_host = 1;                 // of the machine configuration used
};

// `ranks` from train::rank_layouts for `mesh`. tessera::Error (one line) for a layout the model
// does not cover or a machine that lacks a rate it needs (naming the kernel, dtype or link).
StepTimePrediction predict_step_time(const model::ModelConfig& cfg, const comm::MeshLayout& mesh,
                                     const std::vector<train::RankLayout>& ranks,
                                     const MachineDescription& machine);

// The arithmetic of rank `rank`'s part of prediction `t` (predict_step_time's for these ranks and
// machine; tessera-plan --explain): each pass's work by kernel kind with its amount, the rate it
// was priced at and its seconds, each collective, and how they compose into the step.
std::string explain_step_time(const model::ModelConfig& cfg, const comm::MeshLayout& mesh,
                              const std::vector<train::RankLayout>& ranks,
                              const MachineDescription& machine, const StepTimePrediction& t,
                              int rank);

// Model FLOPs utilisation of a predicted step: Megatron's model FLOPs (train/flops.h) of the
// global batch over step time x ranks x a rank's peak at `dtype` (the machine's stated
// peak_flops_per_s, else the configuration's best gemm_forward rate); 0 when it has neither.
double predicted_mfu(const model::ModelConfig& cfg, int64_t global_batch, int world_size,
                     const StepTimePrediction& p, const MachineDescription& machine, DType dtype);

}  // namespace tessera::plan
