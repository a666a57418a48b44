#include "tessera/plan/memory_prediction.h"

#include <algorithm>

namespace tessera::plan {

RankMemoryPrediction predict_rank_memory(const model::ModelConfig& cfg,
                                         const train::RankLayout& r) {
  train::check_zero3_live_limit(cfg, r);
  RankMemoryPrediction p;
  const train::ModelStateBytes states = train::theoretical_model_states(cfg, r);
  const double activations = train::theoretical_activations(cfg, r);
  const double buffers = train::theoretical_comm_buffers(cfg, r);
  const double other = train::theoretical_other(cfg, r);
  p.categories = {states.parameters, states.gradients, states.optimizer,
                  activations,       buffers,          other};
  const double allocated = train::allocated_parameter_elements(cfg, r);
  p.allocated_parameters = allocated * dtype_size(r.compute);
  p.allocated_gradients = 4.0 * allocated;
  const double zero = train::theoretical_zero_buffers(cfg, r);
  const train::Zero3BackwardStart zero3 = train::theoretical_zero3_backward_start(cfg, r);
  const double during_backward =
      std::max(activations + zero3.sends, train::theoretical_backward_peak(cfg, r)) + other +
      (train::theoretical_backward_comm_buffers(cfg, r) - zero);
  // After backward: the embedding's rows while they are reduced (ZeRO 0), then the step.
  const double before_step = zero + other + train::theoretical_embedding_rows_buffers(cfg, r) +
                             train::theoretical_reduction_scratch(cfg, r);
  p.kept_activations = train::theoretical_kept_activations(cfg, r);
  p.peak_bytes = p.allocated_parameters + r.param_offload_buffer_bytes + p.allocated_gradients +
                 states.optimizer + std::max(during_backward, before_step);
  // ZeRO 3 gives pages back: of the unowned parameter parts between their uses, so at
  // backward's start, where its peak is, only those of the units whole then are resident; and of
  // the unowned gradient parts when each iteration starts, so then only the head's, which backward
  // writes first, are.
  p.resident_blocks_bytes = p.peak_bytes;
  if (r.zero_stage == 3)
    p.resident_blocks_bytes -= p.allocated_parameters - states.parameters - zero3.whole_unowned +
                               zero3.unwritten_unowned_grads;
  return p;
}

}  // namespace tessera::plan
