#include "tessera/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tessera/checkpoint/hf_export.h"
#include "tessera/checkpoint/sharded_checkpoint.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/clock.h"
#include "tessera/core/threads.h"
#include "tessera/distributed/sum_scalars.h"
#include "tessera/train/sharding.h"
#include "tessera/optim/deepspeed_lr_schedule.h"
#include "tessera/train/deepspeed_config.h"
#include "tessera/train/flops.h"

namespace tessera::train {
namespace {


optim::LRScheduleOptions schedule_options(const TrainArgs& a, int64_t train_iters) {
  optim::LRScheduleOptions o;
  o.lr = a.lr;
  o.min_lr = a.min_lr;
  o.decay_iters = a.lr_decay_iters > 0 ? a.lr_decay_iters : train_iters;
  o.warmup_iters = a.lr_warmup_fraction >= 0
                       ? optim::warmup_iters_from_fraction(a.lr_warmup_fraction, o.decay_iters)
                       : static_cast<double>(a.lr_warmup_iters);
  o.decay_style = optim::parse_lr_decay_style(a.lr_decay_style);
  o.wsd_decay_iters = a.lr_wsd_decay_iters;
  o.wsd_decay_style = optim::parse_wsd_decay_style(a.lr_wsd_decay_style);
  return o;
}

// Creates the parent directory of `path` and checks that a file can be written there;
// tessera::Error naming `flag` otherwise.
void check_writable(const std::string& path, const std::string& flag) {
  const auto p = std::filesystem::path(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec || !std::ofstream(path + ".probe"))
    throw Error(flag + " " + path + ": cannot write there" + (ec ? " (" + ec.message() + ")" : ""));
  std::filesystem::remove(path + ".probe", ec);
}

// Megatron's recompute flags as a policy (validated by validate_arguments).
model::RecomputePolicy recompute_policy(const TrainArgs& a) {
  using P = model::RecomputePolicy;
  P p;
  if (a.recompute_granularity == "full") p.granularity = P::Granularity::kFull;
  if (a.recompute_granularity == "selective") p.granularity = P::Granularity::kSelective;
  p.method = a.recompute_method == "block" ? P::Method::kBlock : P::Method::kUniform;
  p.num_layers = std::max(1, a.recompute_num_layers);
  return p;
}

// Gradient buckets made of whole model units, merged from the end of the buffer up to about
// `elems` elements, the tied embedding's unit alone: its data-parallel parts must be the same
// elements on the first and the last stage.
std::vector<distributed::FlatRange> unit_buckets(const model::GPTModel& m, int64_t elems) {
  const auto tied = m.tied_embedding_range();
  std::vector<distributed::FlatRange> out;
  distributed::FlatRange open{0, 0};
  for (auto it = m.units().rbegin(); it != m.units().rend(); ++it) {
    const distributed::FlatRange u{it->first, it->second};
    const bool alone = u.begin == tied.first && u.end == tied.second;
    if (open.size() > 0 && (alone || open.size() + u.size() > elems)) {
      out.push_back(open);
      open = {0, 0};
    }
    if (alone) {
      out.push_back(u);
    } else {
      open = open.size() > 0 ? distributed::FlatRange{u.begin, open.end} : u;
    }
  }
  if (open.size() > 0) out.push_back(open);
  return {out.rbegin(), out.rend()};
}

}  // namespace

Trainer::Trainer(const TrainArgs& args, const TrainerGroups& groups)
    : args_(args),
      tp_(groups.tp),
      dp_(groups.dp),
      pp_(groups.pp),
      embedding_(groups.embedding),
      model_group_(groups.model),
      world_(groups.world),
      dp_size_(groups.dp ? groups.dp->size() : 1),
      dp_rank_(groups.dp ? groups.dp->rank() : 0),
      pp_size_(groups.pp ? groups.pp->size() : 1),
      pp_rank_(groups.pp ? groups.pp->rank() : 0),
      world_size_(groups.world ? groups.world->size() : 1),
      pp_rank_of_(groups.pp_rank_of),
      reporting_rank_(!groups.world || groups.world->rank() == 0),
      metrics_(reporting_rank_ ? args.metrics_file : std::string()) {
  const auto& a = args_;
  train_iters_ = a.train_iters > 0 ? a.train_iters : a.train_samples / a.global_batch_size;
  // Refuse now, not after hours of training: a config Transformers cannot load, or an output
  // path that cannot be written.
  if (!a.export_weights.empty() && reporting_rank_) {
    checkpoint::check_hf_exportable(a.model);
    check_writable(a.export_weights, "--export-weights");
  }
  if (!a.timeline_file.empty() && reporting_rank_)
    check_writable(a.timeline_file, "--timeline-file");
  if (!a.save.empty() && reporting_rank_)
    check_writable(checkpoint::latest_file(a.save), "--save");
  const DType dtype = a.bf16 ? DType::kBF16 : a.fp16 ? DType::kF16 : DType::kF32;
  // The pipeline: layers per stage (and virtual stage), this rank's part, the schedule.
  partition_ = {
      a.model.num_layers, pp_size_,
      pipeline::virtual_stages_for(a.model.num_layers, pp_size_, a.num_layers_per_virtual_stage),
      a.decoder_first_pipeline_num_layers, a.decoder_last_pipeline_num_layers};
  chunk_layers_ = pipeline::partition_layers(partition_);
  const pipeline::ScheduleKind kind =
      !a.pipeline_schedule.empty()         ? pipeline::parse_schedule_kind(a.pipeline_schedule)
      : a.num_layers_per_virtual_stage > 0 ? pipeline::ScheduleKind::kInterleaved
                                           : pipeline::ScheduleKind::kOneFOneB;
  const pipeline::ScheduleShape shape{pp_size_, static_cast<int>(a.num_microbatches(dp_size_)),
                                      partition_.virtual_stages};
  pipeline::validate_schedule(kind, shape);
  const distributed::ShardingPlan plan = sharding_plan(a, dp_size_);
  // ZeRO 3 initialises only the parts this rank keeps (DeepSpeed's zero.Init): the whole model
  // never exists on one rank.
  model::GPTModel::ResidentRanges resident;
  if (plan.shards_parameters())
    resident = [&](const std::vector<std::pair<int64_t, int64_t>>& units) {
      return distributed::Zero3Params::resident_ranges(units, dp_size_, dp_rank_,
                                                       plan.persistence_threshold);
    };
  model_ = std::make_unique<model::GPTModel>(
      a.model, dtype, a.seed, tp_, dp_size_,
      pipeline::part_of_rank(partition_, chunk_layers_, pp_rank_), resident);
  model_->set_recompute(recompute_policy(a));
  executor_ = std::make_unique<pipeline::PipelineExecutor>(*model_, pp_, kind, shape);
  timeline_.keep_totals(a.timing_log_level >= 1);
  tp_grads_ = std::make_unique<distributed::TensorParallelGrads>(model_->params(), tp_);
  // ZeRO 3 works per model unit (embeddings, each layer, the head): gradient buckets and
  // parameter gathers alike. A tied embedding split over the pipeline gets a bucket of its own.
  std::vector<distributed::FlatRange> units;
  if (plan.shards_parameters()) {
    for (const auto& [b, e] : model_->units()) units.push_back({b, e});
  }
  const bool split_tied = model_->tied_embedding_range().second > 0;
  dp_grads_ = std::make_unique<distributed::DataParallelGrads>(
      model_->params(), dp_, plan,
      !plan.shards_parameters() && split_tied ? unit_buckets(*model_, plan.bucket_elems) : units);
  if (plan.shards_parameters()) {
    zero3_ = std::make_unique<distributed::Zero3Params>(model_->params(), dp_, units, plan);
    model_->set_param_access(zero3_.get());
  }
  optim::Optimizer::Ranges owned;
  if (plan.shards_optimizer_state())
    for (const auto& r : dp_grads_->owned()) owned.push_back({r.begin, r.end});
  auto optimizer = std::make_unique<optim::Optimizer>(
      model_->params(),
      optim::OptimizerOptions{a.optimizer == "sgd" ? "sgd" : "adam", a.adam_beta1, a.adam_beta2,
                              a.adam_eps, a.sgd_momentum, a.weight_decay},
      owned);
  std::unique_ptr<optim::LRSchedule> schedule;
  if (a.deepspeed_schedule) {
    schedule = std::make_unique<optim::DeepSpeedLRSchedule>(*a.deepspeed_schedule);
  } else {
    schedule = std::make_unique<optim::LRScheduler>(schedule_options(a, train_iters_));
  }
  std::unique_ptr<optim::DynamicLossScaler> scaler;
  if (a.fp16 && a.loss_scale <= 0) {
    scaler = std::make_unique<optim::DynamicLossScaler>(optim::DynamicLossScaler::dynamic(
        a.initial_loss_scale, static_cast<int32_t>(a.loss_scale_window), a.hysteresis,
        a.min_loss_scale));
  } else {
    scaler = std::make_unique<optim::DynamicLossScaler>(
        optim::DynamicLossScaler::fixed(a.loss_scale > 0 ? a.loss_scale : 1.0));
  }
  optimizer_ = std::make_unique<distributed::DistributedOptimizer>(
      model_->params(), std::move(optimizer), std::move(schedule), std::move(scaler), *tp_grads_,
      *dp_grads_, zero3_.get(), world_, model_group_,
      distributed::StepPolicy{a.clip_grad, a.fp16, a.skip_nan_iterations, a.inject_overflow_at});

  // Before the data: a resumed run takes the checkpoint's seed, which orders the data too.
  if (!a.load.empty()) load_checkpoint();
  build_data();
  std::printf(
      "> model: %s family, %lld parameters (%d layers, hidden %d, heads %d/%d, ffn %d, "
      "vocab %lld padded to %lld), compute %s, %d threads\n",
      a.model.family() == model::Family::kGpt2 ? "GPT-2" : "LLaMA",
      static_cast<long long>(a.model.num_parameters()), a.model.num_layers, a.model.hidden_size,
      a.model.num_attention_heads, a.model.kv_heads(), a.model.ffn(),
      static_cast<long long>(a.model.vocab_size), static_cast<long long>(model_->padded_vocab()),
      dtype_name(dtype), num_threads());
  if (tp_.size() > 1)
    std::printf("> tensor parallel: %d ranks%s, %lld parameters (with padding) on each rank\n",
                tp_.size(), tp_.sequence_parallel() ? " with sequence parallelism" : "",
                static_cast<long long>(model_->params().numel()));
  if (dp_size_ > 1)
    std::printf(
        "> data parallel: %d ranks, %lld micro-batches of %lld per rank per iteration, "
        "ZeRO stage %d, %d gradient bucket(s), overlap %s\n",
        dp_size_, static_cast<long long>(a.num_microbatches(dp_size_)),
        static_cast<long long>(a.micro_batch_size), plan.zero_stage(), dp_grads_->num_buckets(),
        !a.overlap_grad_reduce          ? "off"
        : partition_.virtual_stages > 1 ? "off (virtual stages: after each micro-batch)"
                                        : "on");
  if (pp_size_ > 1) {
    std::string layers;
    for (int n : chunk_layers_) {
      if (!layers.empty()) layers += ',';
      layers += std::to_string(n);
    }
    std::printf(
        "> pipeline parallel: %d stages, schedule %s, %d model chunk(s) per rank, layers "
        "per model chunk [%s], %lld micro-batches per iteration\n",
        pp_size_, pipeline::schedule_name(executor_->kind()), partition_.virtual_stages,
        layers.c_str(), static_cast<long long>(a.num_microbatches(dp_size_)));
  }
  if (a.recompute_granularity == "full")
    std::printf("> activation recomputation: full, %s, %d layer(s)\n", a.recompute_method.c_str(),
                a.recompute_num_layers);
  if (a.recompute_granularity == "selective")
    std::printf("> activation recomputation: selective (attention core)\n");
  std::fflush(stdout);
}

Trainer::~Trainer() = default;

std::unique_ptr<pipeline::MicroBatch> Trainer::bind_micro_batch(data::MicroBatch data,
                                                                int64_t iteration,
                                                                bool training) const {
  auto mb = std::make_unique<pipeline::MicroBatch>();
  mb->data = std::move(data);
  const data::MicroBatch& d = mb->data;
  mb->batch = {d.tokens.data(), d.targets.data(),
               d.loss_mask.empty() ? nullptr : d.loss_mask.data(), d.B, d.T};
  mb->ctx = model_->context(d.B, d.T, d.first_sample, args_.seed, iteration, training);
  if (!d.positions.empty()) mb->ctx.sample_positions = d.positions.data();
  if (!d.doc_start.empty()) mb->ctx.doc_start = d.doc_start.data();
  return mb;
}

std::vector<double> Trainer::sum_losses(const std::vector<double>& v) const {
  // Losses live on the last pipeline stage: summing over the pipeline too gives every rank the
  // totals.
  return distributed::sum_over(pp_.get(), distributed::sum_over(dp_.get(), v));
}

void Trainer::sync_tied_embedding() {
  const auto [begin, end] = model_->tied_embedding_range();
  if (end == 0 || !embedding_ || embedding_->size() == 1) return;
  // Both stages hold the same data-parallel part of it (a unit of its own, equally padded).
  const distributed::FlatRange r = optimizer_->optimizer().sharded()
                                       ? distributed::part_of({begin, end}, dp_size_, dp_rank_)
                                       : distributed::FlatRange{begin, end};
  Tensor part = model_->params().flat_grads().slice_rows(r.begin, r.end);
  embedding_->all_reduce(part, comm::ReduceOp::kSum).wait();
}

Trainer::StepOutcome Trainer::train_step(int64_t iteration) {
  const int64_t mbs = args_.micro_batch_size, T = args_.model.seq_length;
  const int64_t num_micro = args_.num_microbatches(dp_size_);
  const double global_tokens = static_cast<double>(args_.global_batch_size) * T;
  const double loss_scale = optimizer_->loss_scale();
  // Gradients of the global mean loss, times the loss scale (1 unless fp16).
  const float grad_scale = static_cast<float>(loss_scale / global_tokens);
  const int64_t timeline_at =
      args_.timeline_iteration > 0 ? args_.timeline_iteration : train_iters_;
  if (!args_.timeline_file.empty() && iteration == timeline_at) {
    if (world_) world_->barrier().wait();  // a common origin for every rank's clock
    timeline_.start();
  }

  StepOutcome out;
  dp_grads_->start_iteration();  // zeroes the gradients
  // The executor asks for micro-batches in increasing order (first forwards come in order).
  auto load = [&](int m) {
    const data::MicroBatch& mb = prefetcher_->next();
    TESSERA_CHECK(mb.first_sample ==
                  data::micro_batch_first_sample(consumed_samples_, m, dp_size_, dp_rank_, mbs));
    return bind_micro_batch(mb, iteration, true);  // a copy: the prefetcher reuses its slot
  };
  // Buckets are reduced in the last micro-batch (ZeRO 0-1) or in every one (ZeRO 2-3): while
  // backward produces them when this rank's part is one chunk; with virtual stages a
  // micro-batch's backward is split into chunks between other micro-batches', so its buckets
  // are reduced once its last chunk is done (each reduction then takes whatever accumulated
  // since the previous one: the sums are the same).
  pipeline::PipelineExecutor::BackwardHooks hooks;
  hooks.before = [&](int m) {
    if (dp_grads_->reduces_in(m, num_micro))
      model_->set_grads_ready_hook([this](int64_t offset) { dp_grads_->grads_ready(offset); });
  };
  hooks.after = [&](int m) {
    model_->set_grads_ready_hook(nullptr);
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
    const distributed::StepResult r =
        optimizer_->step(iteration, out.loss_sum, out.tokens, global_tokens);
    out.grad_norm = r.grad_norm;
    out.skipped = r.skipped;
    out.nan = r.nan;
  }
  if (timeline_.recording()) {
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
        "> timeline of iteration %lld written to %s; idle share of the pipeline phase "
        "per rank:%s; peak activation memory on rank 0: %.2f MiB\n",
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
    first += train_iters_ * args_.global_batch_size;  // held out: after the training samples
  }
  if (sampler == nullptr || args_.eval_iters == 0) return NAN;
  if (!test) ++evaluations_;
  const int64_t mbs = args_.micro_batch_size;
  double loss = 0, tokens = 0;
  const auto t0 = Clock::now();
  double next_progress = 5.0;
  // Each DP rank takes every DP-th micro-batch of the evaluation samples.
  const int64_t batches = args_.eval_iters * args_.num_microbatches(dp_size_);
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
    data::load_micro_batch(*sampler,
                           data::micro_batch_first_sample(first, i, dp_size_, dp_rank_, mbs), mbs,
                           ltor_, mb);
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

int64_t Trainer::train() {
  const auto& a = args_;
  const auto run_start = Clock::now();
  const double flops_per_iter = model_flops(a.model, model_->padded_vocab(), a.global_batch_size);
  const int64_t tokens_per_iter = a.global_batch_size * a.model.seq_length;
  const int world_size = world_size_;
  // Megatron's logging window: time averaged over every iteration, loss over the iterations
  // that updated, skipped and NaN iterations counted within the window.
  double window_time = 0, window_loss = 0;
  int64_t window_iters = 0, window_updates = 0, window_skipped = 0, window_nan = 0;
  double window_wait = 0;
  // The background thread loads this rank's micro-batches in the order train_step takes them:
  // micro-batch k is micro-batch k % num_micro of iteration start + 1 + k / num_micro.
  const int64_t num_micro = a.num_microbatches(dp_size_), mbs = a.micro_batch_size;
  const int64_t start_consumed = consumed_samples_;
  prefetcher_ = std::make_unique<data::Prefetcher>(
      [this, num_micro, mbs, start_consumed](int64_t k, data::MicroBatch& out) {
        const int64_t consumed = start_consumed + (k / num_micro) * args_.global_batch_size;
        const int64_t first =
            data::micro_batch_first_sample(consumed, k % num_micro, dp_size_, dp_rank_, mbs);
        data::load_micro_batch(*train_data_, first, mbs, ltor_, out);
      },
      std::max<int64_t>(train_iters_ - start_iteration_, 0) * num_micro);
  int64_t iteration = 0;
  for (iteration = start_iteration_ + 1; iteration <= train_iters_; ++iteration) {
    MemoryAccountant::instance().reset_peaks();
    const auto t0 = Clock::now();
    const StepOutcome step = train_step(iteration);
    const double dt = seconds_since(t0);
    consumed_samples_ += a.global_batch_size;

    IterationMetrics m;
    m.iteration = iteration;
    m.train_iters = train_iters_;
    m.consumed_samples = consumed_samples_;
    m.global_batch_size = a.global_batch_size;
    m.lm_loss = step.loss_sum / step.tokens;
    m.lr = optimizer_->schedule().lr_at(std::max<int64_t>(optimizer_->optimizer().steps() - 1, 0));
    m.grad_norm = step.grad_norm;
    m.loss_scale = optimizer_->loss_scale();
    m.skipped = step.skipped;
    m.iter_time_s = dt;
    m.tokens_per_s = tokens_per_iter / dt;
    m.tflops_per_rank = flops_per_iter / world_size / dt / 1e12;
    m.peak_mem_bytes = MemoryAccountant::instance().snapshot().total_peak;
    m.data_wait_s = prefetcher_->take_wait_seconds();

    window_time += dt;
    window_wait += m.data_wait_s;
    ++window_iters;
    window_skipped += step.skipped ? 1 : 0;
    window_nan += step.nan ? 1 : 0;
    if (!step.skipped) {
      window_loss += m.lm_loss;
      ++window_updates;
    }
    if (iteration % a.log_interval == 0 || iteration == train_iters_) {
      IterationMetrics avg = m;
      avg.iter_time_s = window_time / window_iters;
      avg.lm_loss = window_updates > 0 ? window_loss / window_updates : m.lm_loss;
      avg.skipped_in_window = window_skipped;
      avg.nan_in_window = window_nan;
      avg.data_wait_s = window_wait / window_iters;
      avg.tokens_per_s = tokens_per_iter / avg.iter_time_s;
      avg.tflops_per_rank = flops_per_iter / world_size / avg.iter_time_s / 1e12;
      std::printf("%s\n", format_log_line(avg).c_str());
      if (a.timing_log_level >= 1) print_breakdown(window_iters);
      std::fflush(stdout);
      window_time = window_loss = window_wait = 0;
      window_iters = window_updates = window_skipped = window_nan = 0;
    }

    // Megatron stops at once on --exit-interval / --exit-duration-in-mins (no extra evaluation,
    // so a time-limited job keeps to its budget); a run that reaches its last iteration ends
    // with a validation pass.
    const bool exit_interval = a.exit_interval > 0 && iteration % a.exit_interval == 0;
    // Every rank must stop after the same iteration (their clocks differ): stop when any rank's
    // time is up, as Megatron does with an all-reduce of the flag.
    bool exit_duration = false;
    if (a.exit_duration_in_mins > 0) {
      const double up = seconds_since(run_start) / 60.0 >= a.exit_duration_in_mins ? 1.0 : 0.0;
      exit_duration = distributed::sum_over(world_.get(), {up})[0] > 0;
    }
    const bool periodic_eval = a.eval_interval > 0 && iteration % a.eval_interval == 0;
    const bool final_eval = a.eval_interval > 0 && iteration == train_iters_;
    if (periodic_eval || final_eval) {
      const double val = evaluate(iteration);  // NaN when there is no validation data
      if (!std::isnan(val)) m.val_loss = val;
    }
    metrics_.write(m);
    if (!a.save.empty() && a.save_interval > 0 && iteration % a.save_interval == 0) {
      save_checkpoint(iteration);
      last_saved_iteration_ = iteration;
    } else {
      finish_pending_save(false);  // publishes a background save once every rank wrote it
    }
    if (exit_interval || exit_duration) {
      std::printf("> exiting after iteration %lld (%s)\n", static_cast<long long>(iteration),
                  exit_interval ? "--exit-interval" : "--exit-duration-in-mins");
      break;
    }
  }
  prefetcher_.reset();
  // Megatron's test pass: once, after a run that reached its last iteration.
  if (iteration > train_iters_ && test_data_ && test_data_->num_samples() > 0)
    evaluate(train_iters_, true);
  iteration = std::min(iteration, train_iters_);
  // Megatron saves at the end too (whatever ended the run), unless that iteration is saved.
  if (!a.save.empty() && iteration > start_iteration_ && iteration != last_saved_iteration_)
    save_checkpoint(iteration);
  finish_pending_save(true);
  if (!a.export_weights.empty()) export_weights();
  return iteration;
}

// Level 1: rank 0's time per phase. Level 2 adds the minimum and maximum over all ranks (as
// Megatron's --timing-log-option minmax), which shows a slow rank or an unbalanced pipeline
// stage; it gathers the totals over the world group, so every rank calls it.
void Trainer::print_breakdown(int64_t iterations) {
  using Phase = pipeline::Timeline::Phase;
  const Phase phases[] = {Phase::kForward, Phase::kBackward, Phase::kRecv,
                          Phase::kSend,    Phase::kGradSync, Phase::kOptimizer};
  std::vector<double> ms;
  for (Phase p : phases) ms.push_back(timeline_.total(p) * 1e3 / static_cast<double>(iterations));
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
      std::snprintf(buf, sizeof buf, " %s: %.1f/%.1f |",
                    pipeline::Timeline::phase_name(phases[i]), lo, hi);
      line += buf;
    }
    std::printf("%s\n", line.c_str());
  }
  timeline_.reset_totals();
}

}  // namespace tessera::train
