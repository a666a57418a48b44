#include "tessera/train/trainer.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tessera/checkpoint/hf_export.h"
#include "tessera/checkpoint/sharded_checkpoint.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/clock.h"
#include "tessera/core/threads.h"
#include "tessera/distributed/sum_scalars.h"
#include "tessera/kernels/gemm.h"
#include "tessera/moe/token_dispatcher.h"
#include "tessera/optim/deepspeed_lr_schedule.h"
#include "tessera/train/deepspeed_config.h"
#include "tessera/train/flops.h"
#include "tessera/train/sharding.h"

namespace tessera::train {
namespace {

// --exit-signal-handler: SIGTERM only raises this flag (the one thing a handler may safely do;
// a lock-free atomic, since any of the process's threads may take the signal); the training
// loop reads it after each iteration. Installed when the trainer is built (so a SIGTERM while
// it loads a checkpoint stops the run after its first iteration) and removed when the loop
// ends, putting back the handler it replaced (a SIGTERM during the final save or export then
// takes its course as without the flag: the default, or the flight recorder's dump).
std::atomic<int> g_sigterm{0};
static_assert(std::atomic<int>::is_always_lock_free);
void on_sigterm(int) { g_sigterm.store(1, std::memory_order_relaxed); }
struct sigaction g_sigterm_before {};

void set_sigterm_handler(bool on) {
  if (!on) {
    sigaction(SIGTERM, &g_sigterm_before, nullptr);
    return;
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI's and the file system's calls resume, not fail with EINTR
  sigaction(SIGTERM, &sa, &g_sigterm_before);
}
bool sigterm_received() { return g_sigterm.load(std::memory_order_relaxed) != 0; }

}  // namespace

Trainer::Trainer(const TrainArgs& args, const TrainerGroups& groups)
    : args_(args),
      tp_(groups.tp),
      dp_(groups.dp),
      cp_(groups.cp),
      pp_(groups.pp),
      embedding_(groups.embedding),
      model_group_(groups.model),
      world_(groups.world),
      ep_(groups.ep),
      edp_(groups.edp),
      expert_model_(groups.expert_model),
      dp_size_(groups.dp ? groups.dp->size() : 1),
      dp_rank_(groups.dp ? groups.dp->rank() : 0),
      cp_size_(groups.cp ? groups.cp->size() : 1),
      cp_rank_(groups.cp ? groups.cp->rank() : 0),
      // The gradient group's ranks are ordered cp fastest (comm/parallel_state.h); its size is
      // DP x CP (checked below).
      data_size_(dp_size_ / cp_size_),
      data_rank_(dp_rank_ / cp_size_),
      pp_size_(groups.pp ? groups.pp->size() : 1),
      pp_rank_(groups.pp ? groups.pp->rank() : 0),
      world_size_(groups.world ? groups.world->size() : 1),
      ep_size_(groups.ep ? groups.ep->size() : 1),
      ep_rank_(groups.ep ? groups.ep->rank() : 0),
      edp_size_(groups.edp ? groups.edp->size() : 1),
      edp_rank_(groups.edp ? groups.edp->rank() : 0),
      experts_whole_(groups.experts_whole),
      pp_rank_of_(groups.pp_rank_of),
      reporting_rank_(!groups.world || groups.world->rank() == 0),
      metrics_(reporting_rank_ ? args.metrics_file : std::string()),
      tensorboard_(args_, !groups.world || groups.world->rank() == groups.world->size() - 1,
                   groups.world ? groups.world->size() : 1),
      stragglers_(groups.world.get()) {
  TESSERA_CHECK(dp_size_ % cp_size_ == 0 && data_size_ > 0);
  if (args_.exit_signal_handler) set_sigterm_handler(true);
  batches_ = batch_schedule_of(args_);
  // (A DeepSpeed config's scheduler counts updates, as DeepSpeed's do.)
  samples_schedule_ =
      !args_.deepspeed_schedule && (!batches_.is_constant() || args_.lr_warmup_samples > 0 ||
                                    args_.lr_decay_samples > 0 || args_.lr_wsd_decay_samples > 0);
  train_iters_ =
      args_.train_iters > 0 ? args_.train_iters : batches_.iterations_for(args_.train_samples);
  current_batch_ = batches_.at(0);
  // Construction, step by step; each step takes what the earlier ones made.
  check_output_paths();
  check_save_shared();
  const PipelinePlan pipeline = plan_pipeline();
  const distributed::ShardingPlan sharding = sharding_plan(args_, dp_size_);
  offload_ = make_offload_runtime(offload_plan(args_, static_cast<int>(sharding.stage)));
  model_ = build_model(sharding);
  runner_ = build_runner();
  executor_ =
      std::make_unique<pipeline::PipelineExecutor>(*runner_, pp_, pipeline.kind, pipeline.shape);
  timeline_.keep_totals(args_.timing_log_level >= 1 || args_.log_timers_to_tensorboard ||
                        args_.log_straggler);
  if (args_.inject_slow_rank >= 0 && args_.inject_slow_rank == (world_ ? world_->rank() : 0))
    executor_->set_forward_delay(args_.inject_slow_forward_ms / 1e3);
  build_gradient_sharding(sharding);
  optimizer_ = build_optimizer(sharding);
  // Before the data: a resumed run continues with the checkpoint's seed, which orders the data
  // and draws the dropout masks.
  seed_ =
      args_.load.empty() && args_.pretrained_checkpoint.empty() ? args_.seed : load_checkpoint();
  build_data();
  print_setup(sharding);
}

Trainer::~Trainer() = default;

void Trainer::load_samples(const data::TokenSampler& sampler, int64_t first,
                           data::MicroBatch& out) const {
  data::load_micro_batch(sampler, first, args_.micro_batch_size, ltor_, out);
  data::keep_context_chunks(out, {cp_size_, cp_rank_});
}

std::unique_ptr<pipeline::MicroBatch> Trainer::bind_micro_batch(data::MicroBatch data,
                                                                int64_t iteration,
                                                                bool training) const {
  auto mb = std::make_unique<pipeline::MicroBatch>();
  mb->data = std::move(data);
  const data::MicroBatch& d = mb->data;
  mb->batch = {d.tokens.data(), d.targets.data(),
               d.loss_mask.empty() ? nullptr : d.loss_mask.data(), d.B, d.T};
  mb->ctx = model_->context(d.B, d.T, d.first_sample, seed_, iteration, training);
  if (!d.positions.empty()) mb->ctx.sample_positions = d.positions.data();
  if (!d.doc_start.empty()) mb->ctx.doc_start = d.doc_start.data();
  if (!d.doc_start_global.empty()) mb->ctx.doc_start_global = d.doc_start_global.data();
  // MoE auxiliary losses: averaged over the global batch's micro-batches (moe_layer.h).
  if (training)
    mb->ctx.moe_aux_loss_scale = optimizer_->loss_scale() *
                                 static_cast<double>(args_.micro_batch_size) /
                                 static_cast<double>(current_batch_);
  return mb;
}

std::vector<double> Trainer::sum_losses(const std::vector<double>& v) const {
  // Losses live on the last pipeline stage: summing over the pipeline too gives every rank the
  // totals.
  return distributed::sum_over(pp_.get(), distributed::sum_over(dp_.get(), v));
}

void Trainer::sync_tied_embedding() {
  for (const distributed::FlatRange& tied : synced_tied_embedding()) {
    // Both stages hold the same data-parallel part of it (a unit of its own, equally padded).
    const distributed::FlatRange r =
        optimizer_->optimizer().sharded() ? distributed::part_of(tied, dp_size_, dp_rank_) : tied;
    Tensor part = model_->params().flat_grads().slice_rows(r.begin, r.end);
    embedding_->all_reduce(part, comm::ReduceOp::kSum).wait();
  }
}

Trainer::StepOutcome Trainer::train_step(int64_t iteration) {
  // The optimizer state does not change before this step's update: its first sub-groups are
  // read while the model computes.
  if (optimizer_nvme_) optimizer_nvme_->prefetch();
  const int64_t mbs = args_.micro_batch_size, T = args_.model.seq_length;
  current_batch_ = batches_.at(consumed_samples_);
  const int64_t num_micro = current_batch_ / (mbs * data_size_);
  executor_->set_num_microbatches(static_cast<int>(num_micro));
  const double global_tokens = static_cast<double>(current_batch_) * T;
  const double loss_scale = optimizer_->loss_scale();
  // Gradients of the global mean loss, times the loss scale (1 unless fp16).
  const float grad_scale = static_cast<float>(loss_scale / global_tokens);
  if (iteration == args_.inject_fault_iteration) {
    const int rank = world_ ? world_->rank() : 0;
    if (args_.inject_crash_rank == rank) {
      std::fprintf(stderr, "test hook: world rank %d crashes at iteration %lld\n", rank,
                   static_cast<long long>(iteration));
      raise(SIGSEGV);
    }
    if (args_.inject_stop_rank == rank) {
      std::fprintf(stderr, "test hook: world rank %d stops at iteration %lld\n", rank,
                   static_cast<long long>(iteration));
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));  // until the job is ended
    }
  }
  if (numerics_) numerics_->begin_iteration(iteration);
  // --timeline-iteration N (default the last) or Megatron's --profile window: the iterations
  // after profile_step_start completed ones, up to profile_step_end completed.
  const int64_t timeline_first = args_.profile                  ? args_.profile_step_start + 1
                                 : args_.timeline_iteration > 0 ? args_.timeline_iteration
                                                                : train_iters_;
  const int64_t timeline_last =
      args_.profile ? std::min(args_.profile_step_end, train_iters_) : timeline_first;
  if (!args_.timeline_file.empty() && iteration == timeline_first) {
    if (world_) world_->barrier().wait();  // a common origin for every rank's clock
    timeline_.start();
  }

  StepOutcome out;
  optimizer_->begin_iteration(iteration);
  dp_grads_->start_iteration();  // zeroes the gradients
  // The executor asks for micro-batches in increasing order (first forwards come in order).
  auto load = [&](int m) {
    const data::MicroBatch& mb = prefetcher_->next();
    TESSERA_CHECK(mb.first_sample == data::micro_batch_first_sample(consumed_samples_, m,
                                                                    data_size_, data_rank_, mbs));
    return bind_micro_batch(mb, iteration, true);  // a copy: the prefetcher reuses its slot
  };
  // Buckets are reduced in the last micro-batch (ZeRO 0-1) or in every one (ZeRO 2-3): while
  // backward produces them when this rank's part is one chunk; with virtual stages a
  // micro-batch's backward is split into chunks between other micro-batches', so its buckets
  // are reduced once its last chunk is done (each reduction then takes whatever accumulated
  // since the previous one: the sums are the same).
  pipeline::PipelineExecutor::BackwardHooks hooks;
  // The reductions of the last micro-batch leave final gradients (GradientOffload stores them).
  hooks.before = [&](int m) {
    dp_grads_->set_accumulation_boundary(m == num_micro - 1);
    if (dp_grads_->reduces_in(m, num_micro))
      runner_->set_grads_ready_hook([this](int64_t offset) { dp_grads_->grads_ready(offset); },
                                    dp_grads_->embedding_rows());
  };
  hooks.after = [&](int m) {
    runner_->set_grads_ready_hook(nullptr);
    dp_grads_->set_accumulation_boundary(m == num_micro - 1);  // before() is not called with V > 1
    if (dp_grads_->reduces_in(m, num_micro)) dp_grads_->finish();
  };
  const model::LossSum s = executor_->train(load, grad_scale, hooks, &timeline_);
  {
    pipeline::TimelineScope t(&timeline_, pipeline::Timeline::Phase::kGradSync);
    sync_tied_embedding();
  }
  const std::vector<double> totals = sum_losses({s.loss_sum, s.tokens});
  out.loss_sum = totals[0];
  out.tokens = totals[1];

  {
    // The norm, the overflow policy and clipping are counted here with the update, as
    // Megatron's optimizer timer does.
    pipeline::TimelineScope t(&timeline_, pipeline::Timeline::Phase::kOptimizer);
    if (optimizer_nvme_ && iteration == args_.inject_kill_in_optimizer_step &&
        (world_ ? world_->rank() : 0) == world_size_ - 1)
      optimizer_nvme_->kill_after_windows(optimizer_nvme_->sub_groups() / 2);
    // The schedule counts updates, or with a sample-based schedule their samples (Megatron).
    const distributed::StepResult r = optimizer_->step(
        iteration, out.loss_sum, out.tokens, global_tokens, samples_schedule_ ? current_batch_ : 1);
    out.grad_norm = r.grad_norm;
    if (r.num_zeros >= 0) out.num_zeros = r.num_zeros;
    // After the update, as Megatron's calc_params_l2_norm (a skipped step: the unchanged norm).
    if (args_.log_params_norm) out.params_norm = optimizer_->params_norm();
    out.skipped = r.skipped;
    out.nan = r.nan;
    // Router statistics of the step; the expert biases move only with an update.
    out.moe = finish_moe_step(*model_, dp_.get(), pp_.get(), !r.skipped);
  }
  if (numerics_) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const distributed::FlatRange& f :
         optimizer_->reported_grad_ranges(dp_rank_ == 0, edp_rank_ == 0))
      ranges.emplace_back(f.begin, f.end);
    numerics_->parameter_grads(model_->params(), ranges);
    numerics_->end_iteration();
  }
  if (timeline_.recording() && iteration >= timeline_last) {
    timeline_.stop();
    const std::vector<double> idle =
        timeline_.write_chrome_trace(args_.timeline_file, world_.get(), pp_rank_of_);
    std::string shares;
    for (double f : idle) {
      char buf[16];
      std::snprintf(buf, sizeof buf, " %.3f", f);
      shares += buf;
    }
    std::printf(
        "> timeline of iteration%s %lld written to %s; idle share of the pipeline phase "
        "per rank:%s; peak activation memory on rank 0: %.2f MiB\n",
        timeline_first == iteration ? "" : ("s " + std::to_string(timeline_first) + " to").c_str(),
        static_cast<long long>(iteration), args_.timeline_file.c_str(), shares.c_str(),
        static_cast<double>(MemoryAccountant::instance().snapshot().peak[static_cast<int>(
            MemoryCategory::kActivations)]) /
            (1 << 20));
  }
  return out;
}

double Trainer::evaluate(int64_t iteration, bool test) {
  const data::TokenSampler* sampler = valid_data_ ? valid_data_.get() : nullptr;
  // Each pass takes the next eval_iters global batches, as Megatron's validation iterator does;
  // the test pass (once, at the end) the first ones of the test split.
  int64_t first = evaluations_ * args_.eval_iters * args_.global_batch_size;
  if (test) {
    sampler = test_data_.get();
    first = 0;
  } else if (args_.mock_data) {
    sampler = train_data_.get();
    first += batches_.samples_after(train_iters_);  // held out: after the training samples
  }
  if (sampler == nullptr || args_.eval_iters == 0) return NAN;
  if (!test) ++evaluations_;
  const int64_t mbs = args_.micro_batch_size;
  double loss = 0, tokens = 0;
  const auto t0 = Clock::now();
  double next_progress = 5.0;
  // Each DP rank takes every DP-th micro-batch of the evaluation samples.
  const int64_t batches = args_.eval_iters * args_.num_microbatches(data_size_);
  // The executor loads micro-batches 0, 1, ... in order: i of them are done when i is asked for.
  auto load = [&](int i) {
    // Progress only when evaluation is slow enough to wonder about, a line every 5 seconds.
    if (seconds_since(t0) > next_progress) {
      std::printf("  evaluating: %lld/%lld micro-batches\n", static_cast<long long>(i),
                  static_cast<long long>(batches));
      std::fflush(stdout);
      next_progress += 5.0;
    }
    data::MicroBatch mb;
    load_samples(*sampler, data::micro_batch_first_sample(first, i, data_size_, data_rank_, mbs),
                 mb);
    return bind_micro_batch(std::move(mb), iteration, false);
  };
  const model::LossSum s = executor_->evaluate(load, static_cast<int>(batches));
  loss = s.loss_sum;
  tokens = s.tokens;
  const std::vector<double> totals = sum_losses({loss, tokens});
  const double val = totals[0] / totals[1];
  std::printf(
      "-----------------------------------------------------------------------------\n"
      " validation loss at iteration %lld%s | lm loss value: %.6E | lm loss PPL: %.6E |\n"
      "-----------------------------------------------------------------------------\n",
      static_cast<long long>(iteration), test ? " on test set" : "", val,
      std::exp(std::min(val, 700.0)));
  if (unigram_entropy_ > 0)
    std::printf(
        " (unigram entropy of the training data: %.3f nats/token; validation loss is "
        "%.1f%% of it)\n",
        unigram_entropy_, 100.0 * val / unigram_entropy_);
  return val;
}

namespace {

// Megatron's logging window: time averaged over every iteration, loss over the iterations that
// updated, skipped and NaN iterations counted within the window.
struct LogWindow {
  double time = 0, loss = 0, wait = 0, tokens = 0, flops = 0;
  int64_t iters = 0, updates = 0, skipped = 0, nan = 0;
  IoStepReport io;  // summed

  // `tokens` and `flops` of the iteration (its global batch may differ from the others').
  void add(const IterationMetrics& m, bool was_nan, double iteration_tokens,
           double iteration_flops) {
    tokens += iteration_tokens;
    flops += iteration_flops;
    time += m.iter_time_s;
    wait += m.data_wait_s;
    io.enabled = m.io.enabled;
    io.read_bytes += m.io.read_bytes;
    io.write_bytes += m.io.write_bytes;
    io.busy_s += m.io.busy_s;
    io.exposed_s += m.io.exposed_s;
    ++iters;
    skipped += m.skipped ? 1 : 0;
    nan += was_nan ? 1 : 0;
    if (!m.skipped) {
      loss += m.lm_loss;
      ++updates;
    }
  }
  // The window's averages, the other fields from the last iteration `m`. Then starts afresh.
  IterationMetrics take_average(const IterationMetrics& m, int world_size) {
    IterationMetrics avg = m;
    avg.iter_time_s = time / iters;
    avg.lm_loss = updates > 0 ? loss / updates : m.lm_loss;
    avg.skipped_in_window = skipped;
    avg.nan_in_window = nan;
    avg.data_wait_s = wait / iters;
    avg.io = io;  // the window's I/O, summed
    avg.tokens_per_s = tokens / time;
    avg.tflops_per_rank = flops / world_size / time / 1e12;
    *this = LogWindow();
    return avg;
  }
};

}  // namespace

void Trainer::start_prefetcher() {
  // The background thread loads this rank's micro-batches in the order train_step takes them,
  // iteration after iteration, each iteration's count from its global batch. It asks for k in
  // increasing order, so a cursor (the iteration holding micro-batch k) only moves forward.
  const int64_t mbs = args_.micro_batch_size;
  struct Cursor {
    int64_t first_k = 0, consumed = 0, num_micro = 0;
  };
  auto cursor = std::make_shared<Cursor>();
  cursor->consumed = consumed_samples_;
  cursor->num_micro = batches_.at(consumed_samples_) / (mbs * data_size_);
  int64_t total = 0;
  for (int64_t it = start_iteration_, consumed = consumed_samples_; it < train_iters_; ++it) {
    const int64_t batch = batches_.at(consumed);
    total += batch / (mbs * data_size_);
    consumed += batch;
    if (batches_.is_constant()) {  // the rest are alike
      total += (train_iters_ - it - 1) * (batch / (mbs * data_size_));
      break;
    }
  }
  prefetcher_ = std::make_unique<data::Prefetcher>(
      [this, mbs, cursor](int64_t k, data::MicroBatch& out) {
        TESSERA_CHECK(k >= cursor->first_k);
        while (k >= cursor->first_k + cursor->num_micro) {
          cursor->first_k += cursor->num_micro;
          cursor->consumed += cursor->num_micro * mbs * data_size_;
          cursor->num_micro = batches_.at(cursor->consumed) / (mbs * data_size_);
        }
        const int64_t first = data::micro_batch_first_sample(cursor->consumed, k - cursor->first_k,
                                                             data_size_, data_rank_, mbs);
        load_samples(*train_data_, first, out);
      },
      std::max<int64_t>(total, 0));
}

int64_t Trainer::train() {
  const auto& a = args_;
  const auto run_start = Clock::now();
  const auto flops_of = [&](int64_t batch) {
    return model_flops(a.model, model_->padded_vocab(), batch);
  };
  LogWindow window;
  start_prefetcher();
  // The first iteration's I/O excludes the initial state's writes and a checkpoint's reads.
  if (offload_->io) io_last_ = offload_->io->counters();
  int64_t iteration = 0;
  for (iteration = start_iteration_ + 1; iteration <= train_iters_; ++iteration) {
    MemoryAccountant::instance().reset_peaks();
    const auto t0 = Clock::now();
    const double gemm_before = kernels::gemm_seconds();
    const StepOutcome step = train_step(iteration);
    const double dt = seconds_since(t0);
    const double gemm_s = kernels::gemm_seconds() - gemm_before;
    consumed_samples_ += current_batch_;
    const double flops_per_iter = flops_of(current_batch_);
    const int64_t tokens_per_iter = current_batch_ * a.model.seq_length;

    IterationMetrics m;
    m.iteration = iteration;
    m.train_iters = train_iters_;
    m.consumed_samples = consumed_samples_;
    m.global_batch_size = current_batch_;
    m.lm_loss = step.loss_sum / step.tokens;
    m.lr = optimizer_->last_lr();
    m.precision = dtype_name(compute_dtype());
    m.grad_norm = step.grad_norm;
    m.num_zeros = step.num_zeros;
    m.params_norm = step.params_norm;
    m.loss_scale = optimizer_->loss_scale();
    m.skipped = step.skipped;
    m.iter_time_s = dt;
    m.tokens_per_s = tokens_per_iter / dt;
    m.tflops_per_rank = flops_per_iter / world_size_ / dt / 1e12;
    m.peak_mem_bytes = MemoryAccountant::instance().snapshot().total_peak;
    m.data_wait_s = prefetcher_->take_wait_seconds();
    m.gemm_s = gemm_s;
    m.moe = step.moe;
    if (offload_->io) {
      const offload::SwapIo::Counters now = offload_->io->counters();
      m.io = {true, now.read_bytes - io_last_.read_bytes, now.write_bytes - io_last_.write_bytes,
              now.busy_s - io_last_.busy_s, now.exposed_s - io_last_.exposed_s};
      io_last_ = now;
    }
    window.add(m, step.nan, static_cast<double>(tokens_per_iter), flops_per_iter);
    stragglers_.add_iteration(dt);
    if (iteration == start_iteration_ + 1) report_memory();  // Megatron's, at its first log
    if (iteration % a.log_interval == 0 || iteration == train_iters_) {
      const int64_t iters = window.iters;
      std::printf(
          "%s\n",
          format_log_line(window.take_average(m, world_size_), a.moe_per_layer_logging).c_str());
      if (a.log_straggler) {
        const double collectives =
            model_->tensor_parallel().comm_seconds() + moe::exchange_seconds();
        std::printf("%s\n", stragglers_.report(timeline_, collectives).line.c_str());
      }
      if (a.timing_log_level >= 1) print_breakdown(iters);
      std::fflush(stdout);
    }

    // Megatron stops at once on --exit-interval / --exit-duration-in-mins (no extra evaluation,
    // so a time-limited job keeps to its budget); a run that reaches its last iteration ends
    // with a validation pass.
    const bool exit_interval = a.exit_interval > 0 && iteration % a.exit_interval == 0;
    // Every rank must stop after the same iteration (their clocks differ): stop when any rank's
    // time is up, as Megatron does with an all-reduce of the flag.
    bool exit_duration = false, exit_signal = false;
    if (a.exit_duration_in_mins > 0 || a.exit_signal_handler) {
      const double up = a.exit_duration_in_mins > 0 &&
                                seconds_since(run_start) / 60.0 >= a.exit_duration_in_mins
                            ? 1.0
                            : 0.0;
      // Megatron's DistributedSignalHandler: a SIGTERM on any rank stops every rank after
      // the same iteration (the flags are summed like the clocks above).
      const double term = a.exit_signal_handler && sigterm_received() ? 1.0 : 0.0;
      const std::vector<double> any = distributed::sum_over(world_.get(), {up, term});
      exit_duration = any[0] > 0;
      exit_signal = any[1] > 0;
    }
    const bool periodic_eval = a.eval_interval > 0 && iteration % a.eval_interval == 0;
    const bool final_eval = a.eval_interval > 0 && iteration == train_iters_;
    if (periodic_eval || final_eval) {
      const double val = evaluate(iteration);  // NaN when there is no validation data
      if (!std::isnan(val)) m.val_loss = val;
    }
    metrics_.write(m);
    tensorboard_.iteration(m, timeline_);
    if (m.val_loss) tensorboard_.validation(iteration, consumed_samples_, *m.val_loss);
    if (!a.save.empty() && a.save_interval > 0 && iteration % a.save_interval == 0) {
      save_checkpoint(iteration);
      last_saved_iteration_ = iteration;
    } else {
      finish_pending_save(false);  // publishes a background save once every rank wrote it
    }
    if (exit_interval || exit_duration || exit_signal) {
      // finish_run() saves this iteration (Megatron saves on every exit).
      std::printf("> exiting after iteration %lld (%s)\n", static_cast<long long>(iteration),
                  exit_signal     ? "SIGTERM, --exit-signal-handler"
                  : exit_interval ? "--exit-interval"
                                  : "--exit-duration-in-mins");
      break;
    }
  }
  prefetcher_.reset();
  if (a.exit_signal_handler) set_sigterm_handler(false);
  const double train_seconds = seconds_since(run_start);
  finish_run(iteration);
  if (!a.tensorboard_dir.empty()) {
    // The writing rank's figures, brought to rank 0 (whose stdout is the job's); every rank
    // takes part (the flag is the same everywhere), the others adding zeros.
    const std::vector<double> tb = distributed::sum_over(
        world_.get(), {static_cast<double>(tensorboard_.scalars()), tensorboard_.seconds(),
                       tensorboard_.enabled() ? train_seconds : 0.0});
    std::printf("> tensorboard: %.0f scalars, %.3f ms of the writing rank's training loop "
                "(%.1f s, %.4f%%) spent logging them\n",
                tb[0], tb[1] * 1e3, tb[2], 100.0 * tb[1] / std::max(tb[2], 1e-9));
  }
  if (numerics_) {
    const std::vector<double> spent = distributed::sum_over(
        world_.get(), {numerics_->seconds(), train_seconds});
    std::printf("> numerics dump: %.3f s of %.1f s of the ranks' training loops (%.2f%%) spent "
                "recording, in %s\n",
                spent[0], spent[1], 100.0 * spent[0] / std::max(spent[1], 1e-9),
                args_.dump_numerics.c_str());
  }
  return std::min(iteration, train_iters_);
}

// After the loop: the test pass, the last save, the export.
void Trainer::finish_run(int64_t iteration) {
  const auto& a = args_;
  // Megatron's test pass: once, after a run that reached its last iteration.
  if (iteration > train_iters_ && test_data_ && test_data_->num_samples() > 0)
    evaluate(train_iters_, true);
  iteration = std::min(iteration, train_iters_);
  // Megatron saves at the end too (whatever ended the run), unless that iteration is saved.
  if (!a.save.empty() && iteration > start_iteration_ && iteration != last_saved_iteration_)
    save_checkpoint(iteration);
  finish_pending_save(true);
  if (!a.export_weights.empty()) export_weights();
  tensorboard_.flush();
}

// Level 1: rank 0's time per phase. Level 2 adds the minimum and maximum over all ranks (as
// Megatron's --timing-log-option minmax), which shows a slow rank or an unbalanced pipeline
// stage; it gathers the totals over the world group, so every rank calls it.
void Trainer::print_breakdown(int64_t iterations) {
  using Phase = pipeline::Timeline::Phase;
  const Phase phases[] = {Phase::kForward, Phase::kBackward, Phase::kRecv,
                          Phase::kSend,    Phase::kGradSync, Phase::kOptimizer};
  const auto seconds = breakdown_window_.take(timeline_);
  std::vector<double> ms;
  for (Phase p : phases)
    ms.push_back(seconds[static_cast<int>(p)] * 1e3 / static_cast<double>(iterations));
  std::string line = " time (ms) per iteration on rank 0 |";
  for (size_t i = 0; i < ms.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %s: %.1f |", pipeline::Timeline::phase_name(phases[i]), ms[i]);
    line += buf;
  }
  std::printf("%s\n", line.c_str());
  if (args_.timing_log_level >= 2) {
    const auto per_rank = distributed::gather_over(world_.get(), ms);
    line = " time (ms) per iteration, min/max over " + std::to_string(per_rank.size()) + " ranks |";
    for (size_t i = 0; i < ms.size(); ++i) {
      double lo = per_rank[0][i], hi = per_rank[0][i];
      for (const auto& r : per_rank) lo = std::min(lo, r[i]), hi = std::max(hi, r[i]);
      char buf[80];
      std::snprintf(buf, sizeof buf, " %s: %.1f/%.1f |", pipeline::Timeline::phase_name(phases[i]),
                    lo, hi);
      line += buf;
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace tessera::train
