// A training run's TensorBoard scalars under Megatron-LM's tag names (training_log and
// evaluate_and_print_results in megatron/training/training.py), written by one rank (the last,
// as Megatron does) through tensorboard::EventFileWriter, whose own thread does the writing.
//
// Every --tensorboard-log-interval iterations (step = iteration; each "X vs samples" repeats X
// with step = consumed samples):
//   learning-rate, batch-size, lm loss, loss-scale, grad-norm        (each also "vs samples")
//   num-zeros, params-norm (each + vs samples)   --log-num-zeros-in-grad, --log-params-norm
//   world-size (+ vs samples)              --log-world-size-to-tensorboard
//   iteration-time, and per-phase seconds per iteration since the previous write:
//     forward-time, backward-time, send-time, recv-time, grads-all-reduce-time, optimizer-time
//                                          --log-timers-to-tensorboard
//   mem-allocated-bytes, mem-max-allocated-bytes (the memory accountant's current and peak of
//     the iteration), mem-reserved-bytes (the process's resident set)
//                                          --log-memory-to-tensorboard
//   throughput (TFLOP/s per rank, Megatron's), tokens-per-second   --log-throughput
//   MoE models: load_balancing_loss and z_loss (Megatron's names, the step's mean over MoE
//     layers, without their coefficients), moe-dropped-fraction; with --moe-per-layer-logging
//     moe/load_balancing_loss_layer_L, moe/z_loss_layer_L, moe/dropped_fraction_layer_L.
// After each evaluation: lm loss validation (+ vs samples), and with
// --log-validation-ppl-to-tensorboard lm loss validation ppl (+ vs samples).
#pragma once

#include <memory>

#include "tessera/pipeline/timeline.h"
#include "tessera/tensorboard/event_file.h"
#include "tessera/train/arguments.h"
#include "tessera/train/metrics.h"

namespace tessera::train {

class TensorBoardLog {
 public:
  // Writes only when args.tensorboard_dir is set and `writer` (this is the writing rank); else
  // every call is a no-op. Throws tessera::Error when the directory cannot be used.
  TensorBoardLog(const TrainArgs& args, bool writer, int world_size);
  bool enabled() const { return file_ != nullptr; }
  // After each training iteration; writes on the log interval. `timeline`: the rank's phase
  // timers (read only with --log-timers-to-tensorboard).
  void iteration(const IterationMetrics& m, const pipeline::Timeline& timeline);
  void validation(int64_t iteration, int64_t consumed_samples, double loss);
  // Everything logged so far reaches the file (the end of a run).
  void flush();
  // What logging cost the training thread: scalars queued and seconds spent in iteration() and
  // validation() (encoding and queueing; the writing is the writer thread's).
  int64_t scalars() const { return scalars_; }
  double seconds() const { return seconds_; }

 private:
  void scalar(const char* tag, double value, int64_t iteration, int64_t samples, bool vs_samples);

  const TrainArgs& args_;
  int world_size_;
  std::unique_ptr<tensorboard::EventFileWriter> file_;
  // The phase times since the previous write, and the iterations since (a resumed run's timeline
  // starts empty at its first iteration, so they are counted, not taken from iteration numbers).
  pipeline::PhaseWindow phases_;
  int64_t iterations_since_write_ = 0;
  int64_t scalars_ = 0;
  double seconds_ = 0;
};

}  // namespace tessera::train
