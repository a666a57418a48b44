#include "tessera/train/moe_step.h"

#include <algorithm>
#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/distributed/sum_scalars.h"

namespace tessera::train {

MoeStepReport finish_moe_step(model::GPTModel& model, comm::ProcessGroup* dp,
                              comm::ProcessGroup* pp, bool update_bias) {
  const model::ModelConfig& cfg = model.config();
  MoeStepReport report;
  if (!cfg.moe.enabled()) return report;
  report.enabled = true;
  const int E = cfg.moe.num_experts;
  // Every MoE layer of the model (global indices) and its row below.
  std::vector<int> moe_layers, row_of(cfg.num_layers, -1);
  const std::vector<bool> mask = cfg.moe_layer_mask();
  for (int l = 0; l < cfg.num_layers; ++l)
    if (mask[l]) {
      row_of[l] = static_cast<int>(moe_layers.size());
      moe_layers.push_back(l);
    }
  // Per MoE layer: micro-batches, aux, z, choices, dropped, E counts. Layers on other pipeline
  // stages contribute zeros, so the sum over both groups holds every layer's global figures
  // (counts are integers below 2^53: exact in double).
  const int width = 5 + E;
  std::vector<double> v(moe_layers.size() * width, 0.0);
  for (auto& [layer, block] : model.moe_layers()) {
    const model::MoeLayerStats s = block->take_stats();
    double* row = v.data() + row_of[layer] * width;
    row[0] = static_cast<double>(s.micro_batches);
    row[1] = s.aux_loss;
    row[2] = s.z_loss;
    row[3] = static_cast<double>(s.choices);
    row[4] = static_cast<double>(s.dropped);
    for (int e = 0; e < E; ++e) row[5 + e] = static_cast<double>(s.expert_count[e]);
  }
  v = distributed::sum_over(pp, distributed::sum_over(dp, v));

  double choices = 0, dropped = 0;
  for (size_t i = 0; i < moe_layers.size(); ++i) {
    const double* row = v.data() + i * width;
    MoeLayerReport r;
    r.layer = moe_layers[i];
    const double mbs = std::max(row[0], 1.0);
    const double aux_coeff = cfg.moe.aux_loss_coeff, z_coeff = cfg.moe.z_loss_coeff;
    r.aux_loss = aux_coeff > 0 ? row[1] / mbs / aux_coeff : 0.0;
    r.z_loss = z_coeff > 0 ? row[2] / mbs / z_coeff : 0.0;
    r.dropped_fraction = row[3] > 0 ? row[4] / row[3] : 0.0;
    r.tokens_min = static_cast<int64_t>(*std::min_element(row + 5, row + 5 + E));
    r.tokens_max = static_cast<int64_t>(*std::max_element(row + 5, row + 5 + E));
    choices += row[3];
    dropped += row[4];
    report.aux_loss += r.aux_loss / static_cast<double>(moe_layers.size());
    report.z_loss += r.z_loss / static_cast<double>(moe_layers.size());
    report.layers.push_back(r);
  }
  report.dropped_fraction = choices > 0 ? dropped / choices : 0.0;

  if (update_bias) {
    for (auto& [layer, block] : model.moe_layers()) {
      const double* row = v.data() + row_of[layer] * width;
      std::vector<int64_t> counts(E);
      for (int e = 0; e < E; ++e) counts[e] = static_cast<int64_t>(row[5 + e]);
      block->update_expert_bias(counts);
    }
  }
  return report;
}

nlohmann::json expert_bias_to_json(model::GPTModel& model, comm::ProcessGroup* pp) {
  const model::ModelConfig& cfg = model.config();
  if (!cfg.moe.enabled() || !cfg.moe.expert_bias) return nullptr;
  const int E = cfg.moe.num_experts;
  // Layers of other stages are zeros here: the sum over the pipeline is each layer's bias.
  std::vector<double> v(static_cast<size_t>(cfg.num_layers) * E, 0.0);
  for (auto& [layer, block] : model.moe_layers())
    for (int e = 0; e < E; ++e) v[layer * E + e] = block->expert_bias()[e];
  v = distributed::sum_over(pp, v);
  nlohmann::json out = nlohmann::json::object();
  const std::vector<bool> mask = cfg.moe_layer_mask();
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (!mask[l]) continue;
    std::vector<float> b(E);
    for (int e = 0; e < E; ++e) b[e] = static_cast<float>(v[l * E + e]);
    out[std::to_string(l)] = b;
  }
  return out;
}

void expert_bias_from_json(model::GPTModel& model, const nlohmann::json& j,
                           const std::string& where) {
  const int E = model.config().moe.num_experts;
  for (auto& [layer, block] : model.moe_layers()) {
    const std::string key = std::to_string(layer);
    std::vector<float> b;
    try {
      b = j.at(key).get<std::vector<float>>();
    } catch (const nlohmann::json::exception&) {
      throw Error(where + ": moe_expert_bias of layer " + key + " is missing or not a list");
    }
    if (static_cast<int>(b.size()) != E)
      throw Error(where + ": moe_expert_bias of layer " + key + " has " +
                  std::to_string(b.size()) + " entries, expected " + std::to_string(E));
    block->set_expert_bias(b);
  }
}

std::string format_moe_report(const MoeStepReport& r, bool per_layer) {
  if (!r.enabled) return "";
  char buf[256];
  std::snprintf(buf, sizeof buf, " moe aux loss: %.4f | moe z loss: %.4f | moe dropped: %.4f |",
                r.aux_loss, r.z_loss, r.dropped_fraction);
  std::string out = buf;
  if (!per_layer) return out;
  for (const MoeLayerReport& l : r.layers) {
    std::snprintf(buf, sizeof buf,
                  "\n   moe layer %3d | aux loss: %.4f | z loss: %.4f | tokens per expert: "
                  "%lld-%lld | dropped: %.4f |",
                  l.layer, l.aux_loss, l.z_loss, static_cast<long long>(l.tokens_min),
                  static_cast<long long>(l.tokens_max), l.dropped_fraction);
    out += buf;
  }
  return out;
}

}  // namespace tessera::train
