// The trainer's once-per-step MoE work (model/moe_layer.h): gather every MoE layer's statistics
// of the step over the data-parallel and pipeline groups, move the expert biases by the global
// batch's counts (aux-loss-free balancing), and report what Megatron logs.
//
// Reported values (log line and metrics file): each layer's auxiliary losses divided by their
// coefficients and averaged over the global batch's micro-batches (Megatron logs loss/coeff, so
// the load-balancing value is 1 at uniform routing), the layer's fewest and most tokens per expert
// (before the capacity), and the fraction of (token, expert) choices the capacity dropped; the
// step's values are the means over MoE layers, and the dropped fraction is over all of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/comm/process_group.h"
#include "tessera/model/gpt_model.h"

namespace tessera::train {

struct MoeLayerReport {
  int layer = 0;  // global index
  double aux_loss = 0, z_loss = 0, dropped_fraction = 0;
  int64_t tokens_min = 0, tokens_max = 0;  // per expert, over the step
};

struct MoeStepReport {
  bool enabled = false;
  double aux_loss = 0, z_loss = 0, dropped_fraction = 0;
  std::vector<MoeLayerReport> layers;
};

// Collective over `dp` and `pp` (either may be nullptr). Takes the local layers' statistics;
// with `update_bias` also steps their expert biases.
MoeStepReport finish_moe_step(model::GPTModel& model, comm::ProcessGroup* dp,
                              comm::ProcessGroup* pp, bool update_bias);

// Every MoE layer's expert bias as {"<global layer>": [E floats]}, gathered over the pipeline
// (collective over `pp`); null when the model has no expert bias. Checkpoints keep it in their
// run state: it is model state that no optimizer holds.
nlohmann::json expert_bias_to_json(model::GPTModel& model, comm::ProcessGroup* pp);
// Sets this rank's layers' expert biases from expert_bias_to_json()'s output; tessera::Error
// naming `where` when a layer is missing or has the wrong length.
void expert_bias_from_json(model::GPTModel& model, const nlohmann::json& j,
                           const std::string& where);

// " moe aux loss: ... | moe z loss: ... | moe dropped: ... |" and, per layer, a line each.
std::string format_moe_report(const MoeStepReport& r, bool per_layer);

}  // namespace tessera::train
