// tessera-train's logging and diagnostics flags, DeepSpeed's launcher flags and the test hooks
// (flag_groups.h): what a run reports and how tests plant faults, apart from what it computes.
#include <CLI/CLI.hpp>

#include "tessera/train/arguments.h"
#include "tessera/train/flag_groups.h"

namespace tessera::train {

void add_logging_flags(FlagTable& t) {
  t.group(FlagGroup::kLogging);
  t.option("--log-interval", &TrainArgs::log_interval)->check(CLI::PositiveNumber);
  t.flag("--moe-per-layer-logging", &TrainArgs::moe_per_layer_logging,
         "log each MoE layer's aux loss, z-loss, tokens per expert and dropped fraction");
  t.option("--timing-log-level", &TrainArgs::timing_log_level,
           "0: iteration time only; 1: also rank 0's time per phase (forward, backward, "
           "waits for pipeline transfers, gradient reduction, optimizer); 2: and each "
           "phase's minimum and maximum over all ranks")
      ->check(CLI::Range(0, 2));
  t.option("--metrics-file", &TrainArgs::metrics_file, "JSON lines of per-iteration metrics");
  t.option("--tensorboard-dir", &TrainArgs::tensorboard_dir,
           "write TensorBoard event files here (the last rank, as Megatron)");
  t.option("--tensorboard-log-interval", &TrainArgs::tensorboard_log_interval,
           "iterations between TensorBoard scalars")
      ->check(CLI::PositiveNumber);
  t.option("--tensorboard-queue-size", &TrainArgs::tensorboard_queue_size,
           "events waiting for the TensorBoard writer thread at most")
      ->check(CLI::PositiveNumber);
  t.flag("--log-validation-ppl-to-tensorboard", &TrainArgs::log_validation_ppl_to_tensorboard,
         "also 'lm loss validation ppl'");
  t.flag("--log-timers-to-tensorboard", &TrainArgs::log_timers_to_tensorboard,
         "also 'iteration-time' and the per-phase times (forward-backward, optimizer, ...)");
  t.flag("--log-memory-to-tensorboard", &TrainArgs::log_memory_to_tensorboard,
         "also 'mem-allocated-bytes', 'mem-max-allocated-bytes' and 'mem-reserved-bytes' (RSS)");
  t.flag("--log-throughput", &TrainArgs::log_throughput,
         "also 'throughput' (TFLOP/s per rank) and 'tokens-per-second'");
  t.flag("--log-world-size-to-tensorboard", &TrainArgs::log_world_size_to_tensorboard,
         "also 'world-size'");
  t.flag("--log-params-norm", &TrainArgs::log_params_norm,
         "the L2 norm of the fp32 master weights after each step: 'params norm' in the log line, "
         "'params-norm' in TensorBoard, params_norm in the metrics file");
  t.flag("--log-num-zeros-in-grad", &TrainArgs::log_num_zeros_in_grad,
         "the global gradient's elements that are exactly zero: 'num zeros' in the log line, "
         "'num-zeros' in TensorBoard, num_zeros in the metrics file");
  t.option("--dump-numerics", &TrainArgs::dump_numerics,
           "record every micro-batch's layer outputs and input gradients and every step's "
           "parameter gradients (norm, max, mean, checksum) to DIR/numerics.rank<R>.jsonl; "
           "tessera-compare --localize A B finds where two runs part");
  t.flag("--log-straggler", &TrainArgs::log_straggler,
         "after each log line: every timer's minimum and maximum over the ranks with their ranks, "
         "and the rank with the most compute time (forward + backward + optimizer)");
  t.option("--timeline-file", &TrainArgs::timeline_file,
           "write a Chrome trace (Perfetto) of every rank's phases for one iteration");
  t.option("--timeline-iteration", &TrainArgs::timeline_iteration,
           "the iteration --timeline-file records (default: the last)")
      ->check(CLI::NonNegativeNumber);
}

void add_deepspeed_and_test_flags(FlagTable& t) {
  t.group(FlagGroup::kDeepSpeed);
  t.flag("--deepspeed", &TrainArgs::deepspeed, "use a DeepSpeed JSON config (--deepspeed_config)");
  t.option("--deepspeed_config,--deepspeed-config", &TrainArgs::deepspeed_config,
           "DeepSpeed JSON: batch sizes, zero_optimization, fp16/bf16, optimizer, "
           "scheduler, gradient_clipping");
  t.group(FlagGroup::kTestHooks);
  t.option("--kill-during-save-at-iteration", &TrainArgs::kill_during_save_at,
           "test hook: the last rank kills itself in the middle of this iteration's save");
  t.option("--inject-overflow-at-iteration", &TrainArgs::inject_overflow_at,
           "test hook: make this iteration's gradients overflow");
  t.option("--inject-slow-rank", &TrainArgs::inject_slow_rank,
           "test hook: this world rank sleeps --inject-slow-forward-ms in every forward chunk");
  t.option("--inject-grad-ulp-layer", &TrainArgs::inject_grad_ulp_layer,
           "test hook, with --dump-numerics: the rank holding this layer at TP and CP rank 0 "
           "adds one ulp to the first element of its input gradient in the run's first "
           "micro-batch");
  t.option("--inject-stop-rank", &TrainArgs::inject_stop_rank,
           "test hook: this world rank stops (sleeps until killed) at the start of "
           "--inject-fault-iteration, before any of its collectives");
  t.option("--inject-kill-in-optimizer-step", &TrainArgs::inject_kill_in_optimizer_step,
           "test hook, with optimizer state on NVMe: the last rank kills itself (SIGKILL) in the "
           "middle of this iteration's optimizer step, half its sub-groups written");
  t.option("--inject-crash-rank", &TrainArgs::inject_crash_rank,
           "test hook: this world rank crashes (SIGSEGV) at the start of --inject-fault-iteration");
  t.option("--inject-fault-iteration", &TrainArgs::inject_fault_iteration,
           "test hook: see --inject-stop-rank and --inject-crash-rank")
      ->check(CLI::PositiveNumber);
  t.option("--inject-slow-forward-ms", &TrainArgs::inject_slow_forward_ms,
           "test hook: see --inject-slow-rank")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace tessera::train
