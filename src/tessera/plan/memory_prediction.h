// What one rank of a layout will hold, predicted before anything runs (tessera-plan).
//
// The categories are the memory report's theory (train/memory_report.h), computed by the same
// functions, so there is one source of truth for the arithmetic: parameters, gradients and
// optimizer state as resident bytes, the activations' peak, communication buffers and the
// kernels' scratch.
//
// peak_bytes predicts the memory accountant's peak (core/memory.h), the figure tessera-train
// logs as `peak mem` and writes as `peak_mem_bytes`. The accountant counts allocations, not
// resident pages, so the flat parameter and gradient buffers count whole (every unit padded to a
// multiple of lcm(DP, expert DP)) even where ZeRO 2-3 give the pages of unowned parts back. The
// categories do not all peak at once: activations peak when the first backward starts, with the
// kernels' scratch and the tensor-/context-parallel staging; ZeRO's reduce-scattered gradient
// parts are allocated as backward completes each bucket (and freed when the reduction completes),
// while the layers not yet reached still keep their activations; ZeRO 3 gathers the units
// backward will use ahead of it, each with a send copy of the owned part. So
//   peak = values + fp32 gradients (allocated) + optimizer state + other + non-ZeRO buffers
//          + max(activations + ZeRO 3's gathers in flight,
//                kept activations + ZeRO parts launched so far, and under a pipeline at
//                  ZeRO 2-3 the other micro-batches' activations + all parts,
//                all ZeRO parts)
// (train::theoretical_zero3_backward_start, theoretical_backward_peak, theoretical_zero_buffers).
// The micro-batch count is the first global batch's; threads a rank as given.
#pragma once

#include <array>

#include "tessera/model/config.h"
#include "tessera/train/memory_report.h"

namespace tessera::plan {

struct RankMemoryPrediction {
  // train::kReportCategoryNames order; the memory report's theory column.
  std::array<double, train::kReportCategories> categories{};
  double allocated_parameters = 0, allocated_gradients = 0;  // the accountant's view
  double peak_bytes = 0;
  // The pages of the accountant's blocks resident at that peak: peak_bytes less what ZeRO 3 has
  // given back (core/page_pool.h keeps the blocks' pages at the live high-water).
  double resident_blocks_bytes = 0;
  // Of the activations' peak, what the layers keep (train::theoretical_kept_activations).
  double kept_activations = 0;
};

// tessera::Error, as the trainer's, for a layout the trainer refuses at start: ZeRO 3's
// --stage3-max-live-parameters below a step's least (train::check_zero3_live_limit).
RankMemoryPrediction predict_rank_memory(const model::ModelConfig& cfg, const train::RankLayout& r);

}  // namespace tessera::plan
