// Per-iteration metrics: the Megatron-style log line on stdout and `--metrics-file` JSON lines.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "tessera/train/moe_step.h"

namespace tessera::train {

// This rank's swap I/O of offloaded state during one iteration (or a log window's sum).
struct IoStepReport {
  bool enabled = false;  // the run offloads to NVMe
  int64_t read_bytes = 0, write_bytes = 0;
  double busy_s = 0;     // wall time with I/O in flight
  double exposed_s = 0;  // of it, time training waited for I/O
  // The share of I/O time overlapped with compute.
  double hidden_fraction() const {
    return busy_s > 0 ? std::max(0.0, 1.0 - exposed_s / busy_s) : 0.0;
  }
};

struct IterationMetrics {
  int64_t iteration = 0;
  int64_t train_iters = 0;
  int64_t consumed_samples = 0;
  int64_t global_batch_size = 0;
  double lm_loss = 0;          // mean over the global batch's counted tokens, before the update
  double lr = 0;
  const char* precision = "fp32";  // the compute dtype (dtype_name): fp32, bf16 or fp16
  double grad_norm = 0;        // global L2 norm before clipping (unscaled)
  std::optional<double> num_zeros;    // --log-num-zeros-in-grad
  std::optional<double> params_norm;  // --log-params-norm: after the step
  double loss_scale = 1;
  bool skipped = false;        // update skipped (overflow or NaN with --skip-nan-iterations)
  int64_t skipped_in_window = 0;  // log line: skipped iterations since the previous log line
  int64_t nan_in_window = 0;      // log line: NaN iterations since the previous log line
  double iter_time_s = 0;
  double tokens_per_s = 0;
  double tflops_per_rank = 0;
  int64_t peak_mem_bytes = 0;
  double data_wait_s = 0;      // time the step waited for its micro-batches (the prefetcher)
  // Wall time this rank's step spent inside matrix products (kernels::gemm_seconds: the outermost
  // gemm calls, summed over the threads that call them), for comparison with tessera-plan's
  // compute_gemm_s.
  double gemm_s = 0;
  std::optional<double> val_loss;
  MoeStepReport moe;           // MoE models: the step's router statistics (moe_step.h)
  IoStepReport io;             // offloaded state: the iteration's swap I/O
};

class MetricsWriter {
 public:
  // path empty: no file. Throws tessera::Error if the file cannot be opened.
  explicit MetricsWriter(const std::string& path);
  void write(const IterationMetrics& m);

 private:
  std::ofstream file_;
};

// The Megatron-style line: " iteration   10/  100 | consumed samples: ... | lm loss: ...", plus
// the MoE figures of the step (per layer with `moe_per_layer`) for an MoE model.
std::string format_log_line(const IterationMetrics& m, bool moe_per_layer = false);

}  // namespace tessera::train
