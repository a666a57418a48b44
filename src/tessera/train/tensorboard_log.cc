#include "tessera/train/tensorboard_log.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "tessera/core/memory.h"

namespace tessera::train {
namespace {

// Megatron's timer names for Tessera's phases.
const char* timer_tag(pipeline::Timeline::Phase p) {
  using Phase = pipeline::Timeline::Phase;
  switch (p) {
    case Phase::kForward:
      return "forward-time";
    case Phase::kBackward:
      return "backward-time";
    case Phase::kSend:
      return "send-time";
    case Phase::kRecv:
      return "recv-time";
    case Phase::kGradSync:
      return "grads-all-reduce-time";
    case Phase::kOptimizer:
      return "optimizer-time";
    case Phase::kCount:
      break;
  }
  return "?";
}

}  // namespace

TensorBoardLog::TensorBoardLog(const TrainArgs& args, bool writer, int world_size)
    : args_(args), world_size_(world_size) {
  if (args.tensorboard_dir.empty() || !writer) return;
  file_ = std::make_unique<tensorboard::EventFileWriter>(args.tensorboard_dir,
                                                         args.tensorboard_queue_size);
}

void TensorBoardLog::scalar(const char* tag, double value, int64_t iteration, int64_t samples,
                            bool vs_samples) {
  file_->add_scalar(tag, value, iteration);
  ++scalars_;
  if (vs_samples) {
    file_->add_scalar(std::string(tag) + " vs samples", value, samples);
    ++scalars_;
  }
}

void TensorBoardLog::iteration(const IterationMetrics& m, const pipeline::Timeline& timeline) {
  if (!file_) return;
  ++iterations_since_write_;
  if (m.iteration % args_.tensorboard_log_interval != 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t it = m.iteration, samples = m.consumed_samples;
  scalar("learning-rate", m.lr, it, samples, true);
  scalar("batch-size", static_cast<double>(m.global_batch_size), it, samples, true);
  scalar("lm loss", m.lm_loss, it, samples, true);
  scalar("loss-scale", m.loss_scale, it, samples, true);
  if (args_.log_world_size_to_tensorboard) scalar("world-size", world_size_, it, samples, true);
  scalar("grad-norm", m.grad_norm, it, samples, true);
  if (m.num_zeros) scalar("num-zeros", *m.num_zeros, it, samples, true);
  if (m.params_norm) scalar("params-norm", *m.params_norm, it, samples, true);
  if (args_.log_timers_to_tensorboard) {
    scalar("iteration-time", m.iter_time_s, it, samples, false);
    const double iters = static_cast<double>(std::max<int64_t>(iterations_since_write_, 1));
    const auto seconds = phases_.take(timeline);
    for (int p = 0; p < pipeline::PhaseWindow::kPhases; ++p)
      scalar(timer_tag(static_cast<pipeline::Timeline::Phase>(p)), seconds[p] / iters, it, samples,
             false);
  }
  iterations_since_write_ = 0;
  if (args_.log_memory_to_tensorboard) {
    const MemorySnapshot mem = MemoryAccountant::instance().snapshot();
    scalar("mem-allocated-bytes", static_cast<double>(mem.total_current), it, samples, false);
    scalar("mem-max-allocated-bytes", static_cast<double>(m.peak_mem_bytes), it, samples, false);
    scalar("mem-reserved-bytes", static_cast<double>(process_resident_bytes()), it, samples, false);
  }
  if (args_.log_throughput) {
    scalar("throughput", m.tflops_per_rank, it, samples, false);
    scalar("tokens-per-second", m.tokens_per_s, it, samples, false);
  }
  if (m.moe.enabled) {
    scalar("load_balancing_loss", m.moe.aux_loss, it, samples, false);
    scalar("z_loss", m.moe.z_loss, it, samples, false);
    scalar("moe-dropped-fraction", m.moe.dropped_fraction, it, samples, false);
    if (args_.moe_per_layer_logging)
      for (const MoeLayerReport& l : m.moe.layers) {
        const std::string n = std::to_string(l.layer);
        file_->add_scalar("moe/load_balancing_loss_layer_" + n, l.aux_loss, it);
        file_->add_scalar("moe/z_loss_layer_" + n, l.z_loss, it);
        file_->add_scalar("moe/dropped_fraction_layer_" + n, l.dropped_fraction, it);
        scalars_ += 3;
      }
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void TensorBoardLog::validation(int64_t iteration, int64_t consumed_samples, double loss) {
  if (!file_) return;
  scalar("lm loss validation", loss, iteration, consumed_samples, true);
  if (args_.log_validation_ppl_to_tensorboard)
    scalar("lm loss validation ppl", std::exp(std::min(20.0, loss)), iteration, consumed_samples,
           true);
}

void TensorBoardLog::flush() {
  if (file_) file_->flush();
}

}  // namespace tessera::train
