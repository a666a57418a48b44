#include "tessera/train/metrics.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::train {

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  file_.open(path, std::ios::out | std::ios::trunc);
  if (!file_) throw Error("--metrics-file " + path + ": cannot open for writing");
}

void MetricsWriter::write(const IterationMetrics& m) {
  if (!file_.is_open()) return;
  nlohmann::ordered_json j;
  j["iteration"] = m.iteration;
  j["consumed_samples"] = m.consumed_samples;
  j["lm_loss"] = m.lm_loss;
  j["lr"] = m.lr;
  j["precision"] = m.precision;
  j["grad_norm"] = m.grad_norm;
  if (m.num_zeros) j["num_zeros"] = *m.num_zeros;
  if (m.params_norm) j["params_norm"] = *m.params_norm;
  j["loss_scale"] = m.loss_scale;
  j["skipped"] = m.skipped;
  j["iter_time_s"] = m.iter_time_s;
  j["tokens_per_s"] = m.tokens_per_s;
  j["tflops_per_rank"] = m.tflops_per_rank;
  j["peak_mem_bytes"] = m.peak_mem_bytes;
  j["data_wait_s"] = m.data_wait_s;
  j["gemm_s"] = m.gemm_s;
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  if (m.io.enabled) {
    j["io_read_bytes"] = m.io.read_bytes;
    j["io_write_bytes"] = m.io.write_bytes;
    j["io_busy_s"] = m.io.busy_s;
    j["io_hidden_fraction"] = m.io.hidden_fraction();
  }
  if (m.moe.enabled) {
    j["moe_aux_loss"] = m.moe.aux_loss;
    j["moe_z_loss"] = m.moe.z_loss;
    j["moe_dropped_fraction"] = m.moe.dropped_fraction;
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const MoeLayerReport& l : m.moe.layers)
      layers.push_back({{"layer", l.layer},
                        {"aux_loss", l.aux_loss},
                        {"z_loss", l.z_loss},
                        {"tokens_per_expert_min", l.tokens_min},
                        {"tokens_per_expert_max", l.tokens_max},
                        {"dropped_fraction", l.dropped_fraction}});
    j["moe_layers"] = layers;
  }
  // NaN/Inf are not JSON: nlohmann writes null for them, which readers can detect.
  file_ << j.dump() << "\n";
  file_.flush();
}

std::string format_log_line(const IterationMetrics& m, bool moe_per_layer) {
  char head[400], norms[96] = "", tail[320];
  std::snprintf(head, sizeof head,
                " iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration "
                "(ms): %.1f | learning rate: %.6E | global batch size: %5lld | lm loss: %.6E | "
                "loss scale: %.1f | grad norm: %.3f |",
                static_cast<long long>(m.iteration), static_cast<long long>(m.train_iters),
                static_cast<long long>(m.consumed_samples), m.iter_time_s * 1e3, m.lr,
                static_cast<long long>(m.global_batch_size), m.lm_loss, m.loss_scale, m.grad_norm);
  // Megatron's order: grad norm, num zeros, params norm, then the skipped iterations.
  if (m.num_zeros) std::snprintf(norms, sizeof norms, " num zeros: %.1f |", *m.num_zeros);
  if (m.params_norm) {
    const size_t used = std::strlen(norms);
    std::snprintf(norms + used, sizeof norms - used, " params norm: %.3f |", *m.params_norm);
  }
  std::snprintf(tail, sizeof tail,
                " number of skipped iterations: %3lld | number of nan iterations: %3lld | "
                "tokens/s: %.0f | TFLOP/s/rank: %.3f | peak mem (MiB): %.1f | data wait (ms): "
                "%.1f |",
                static_cast<long long>(m.skipped_in_window), static_cast<long long>(m.nan_in_window),
                m.tokens_per_s, m.tflops_per_rank, m.peak_mem_bytes / 1048576.0,
                m.data_wait_s * 1e3);
  char io[160] = "";
  if (m.io.enabled)
    std::snprintf(io, sizeof io, " io: %.3f GB read, %.3f GB written, %.2f GB/s, %.0f%% hidden |",
                  m.io.read_bytes / 1e9, m.io.write_bytes / 1e9,
                  m.io.busy_s > 0 ? (m.io.read_bytes + m.io.write_bytes) / 1e9 / m.io.busy_s : 0.0,
                  100.0 * m.io.hidden_fraction());
  return std::string(head) + norms + tail + io + format_moe_report(m.moe, moe_per_layer);
}

}  // namespace tessera::train
