#include "tessera/train/trainer.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "tessera/checkpoint/hf_export.h"
#include "tessera/comm/parallel_state.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/threads.h"
#include "tessera/data/byte_tokenizer.h"
#include "tessera/distributed/gather_parameter.h"
#include "tessera/distributed/sum_scalars.h"
#include "tessera/optim/deepspeed_lr_schedule.h"
#include "tessera/train/deepspeed_config.h"
#include "tessera/train/flops.h"

namespace tessera::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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

}  // namespace

Trainer::Trainer(const TrainArgs& args, const TrainerGroups& groups)
    : args_(args), tp_(groups.tp), dp_(groups.dp), world_(groups.world),
      dp_size_(groups.dp ? groups.dp->size() : 1), dp_rank_(groups.dp ? groups.dp->rank() : 0),
      world_size_(groups.world ? groups.world->size() : 1),
      reporting_rank_(!groups.world || groups.world->rank() == 0),
      metrics_(reporting_rank_ ? args.metrics_file : std::string()) {
  const auto& a = args_;
  train_iters_ = a.train_iters > 0 ? a.train_iters : a.train_samples / a.global_batch_size;
  if (!a.export_weights.empty() && reporting_rank_) {
    // Refuse now, not after hours of training: a config Transformers cannot load, or a path
    // that cannot be written.
    checkpoint::check_hf_exportable(a.model);
    const auto path = std::filesystem::path(a.export_weights);
    std::error_code ec;
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    if (ec || !std::ofstream(a.export_weights + ".probe"))
      throw Error("--export-weights " + a.export_weights + ": cannot write there" +
                  (ec ? " (" + ec.message() + ")" : ""));
    std::filesystem::remove(a.export_weights + ".probe", ec);
  }
  const DType dtype = a.bf16 ? DType::kBF16 : a.fp16 ? DType::kF16 : DType::kF32;
  model_ = std::make_unique<model::GPTModel>(a.model, dtype, a.seed, tp_, dp_size_);
  tp_grads_ = std::make_unique<distributed::TensorParallelGrads>(model_->params(), tp_);
  const int zero_stage = std::max(a.zero_stage, a.use_distributed_optimizer ? 1 : 0);
  const bool sharded = zero_stage >= 1;
  // Megatron's default bucket: max(40M, 1M x DP) elements.
  const int64_t bucket = a.ddp_bucket_size > 0 ? a.ddp_bucket_size
                                               : std::max<int64_t>(40'000'000, 1'000'000 * dp_size_);
  // ZeRO 3 works per model unit (embeddings, each layer, the head): gradient buckets and
  // parameter gathers alike.
  std::vector<distributed::FlatRange> units;
  if (zero_stage == 3)
    for (const auto& [b, e] : model_->units()) units.push_back({b, e});
  dp_grads_ = std::make_unique<distributed::DataParallelGrads>(
      model_->params(), dp_, bucket, zero_stage, a.overlap_grad_reduce, units);
  if (zero_stage == 3) {
    zero3_ = std::make_unique<distributed::Zero3Params>(
        model_->params(), dp_, units, a.stage3_param_persistence_threshold,
        a.stage3_prefetch_bucket_size, a.stage3_max_live_parameters);
    model_->set_param_access(zero3_.get());
  }
  optim::Optimizer::Ranges owned;
  if (sharded)
    for (const auto& r : dp_grads_->owned()) owned.push_back({r.begin, r.end});
  optimizer_ = std::make_unique<optim::Optimizer>(
      model_->params(),
      optim::OptimizerOptions{a.optimizer == "sgd" ? "sgd" : "adam", a.adam_beta1, a.adam_beta2,
                              a.adam_eps, a.sgd_momentum, a.weight_decay},
      owned);
  if (a.deepspeed_schedule) {
    scheduler_ = std::make_unique<optim::DeepSpeedLRSchedule>(*a.deepspeed_schedule);
  } else {
    scheduler_ = std::make_unique<optim::LRScheduler>(schedule_options(a, train_iters_));
  }
  if (a.fp16 && a.loss_scale <= 0) {
    scaler_ = std::make_unique<optim::DynamicLossScaler>(optim::DynamicLossScaler::dynamic(
        a.initial_loss_scale, static_cast<int32_t>(a.loss_scale_window), a.hysteresis,
        a.min_loss_scale));
  } else {
    scaler_ = std::make_unique<optim::DynamicLossScaler>(
        optim::DynamicLossScaler::fixed(a.loss_scale > 0 ? a.loss_scale : 1.0));
  }

  build_data();
  std::printf("> model: %s family, %lld parameters (%d layers, hidden %d, heads %d/%d, ffn %d, "
              "vocab %lld padded to %lld), compute %s, %d threads\n",
              a.model.family() == model::Family::kGpt2 ? "GPT-2" : "LLaMA",
              static_cast<long long>(a.model.num_parameters()), a.model.num_layers,
              a.model.hidden_size, a.model.num_attention_heads, a.model.kv_heads(), a.model.ffn(),
              static_cast<long long>(a.model.vocab_size), static_cast<long long>(model_->padded_vocab()),
              dtype_name(dtype), num_threads());
  if (tp_.size() > 1)
    std::printf("> tensor parallel: %d ranks%s, %lld parameters (with padding) on each rank\n",
                tp_.size(), tp_.sequence_parallel() ? " with sequence parallelism" : "",
                static_cast<long long>(model_->params().numel()));
  if (dp_size_ > 1)
    std::printf("> data parallel: %d ranks, %lld micro-batches of %lld per rank per iteration, "
                "ZeRO stage %d, %d gradient bucket(s), overlap %s\n",
                dp_size_, static_cast<long long>(a.num_microbatches(dp_size_)),
                static_cast<long long>(a.micro_batch_size), zero_stage,
                dp_grads_->num_buckets(), a.overlap_grad_reduce ? "on" : "off");
  std::fflush(stdout);
}

Trainer::~Trainer() = default;

model::LossSum Trainer::run_micro_batch(const data::MicroBatch& mb, int64_t iteration,
                                        bool training, float grad_scale) {
  model::Batch batch{mb.tokens.data(), mb.targets.data(),
                     mb.loss_mask.empty() ? nullptr : mb.loss_mask.data(), mb.B, mb.T};
  auto ctx = model_->context(mb.B, mb.T, mb.first_sample, args_.seed, iteration, training);
  if (!mb.positions.empty()) ctx.sample_positions = mb.positions;
  if (!mb.doc_start.empty()) ctx.doc_start = mb.doc_start.data();
  if (!training) return model_->forward_loss(batch, ctx);
  return model_->forward_backward(batch, ctx, grad_scale);
}

std::vector<double> Trainer::sum_over_dp(const std::vector<double>& v) const {
  return distributed::sum_over(dp_.get(), v);
}

Trainer::StepOutcome Trainer::train_step(int64_t iteration) {
  const int64_t mbs = args_.micro_batch_size, T = args_.model.seq_length;
  const int64_t num_micro = args_.num_microbatches(dp_size_);
  const double global_tokens = static_cast<double>(args_.global_batch_size) * T;
  const double loss_scale = scaler_->scale();
  // Gradients of the global mean loss, times the loss scale (1 unless fp16).
  const float grad_scale = static_cast<float>(loss_scale / global_tokens);

  StepOutcome out;
  dp_grads_->start_iteration();  // zeroes the gradients
  for (int64_t m = 0; m < num_micro; ++m) {
    const data::MicroBatch& mb = prefetcher_->next();
    TESSERA_CHECK(mb.first_sample ==
                  data::micro_batch_first_sample(consumed_samples_, m, dp_size_, dp_rank_, mbs));
    // Buckets are reduced while backward produces them: in the last micro-batch (ZeRO 0-1) or
    // in every one (ZeRO 2).
    const bool reduce = dp_grads_->reduces_in(m, num_micro);
    if (reduce)
      model_->set_grads_ready_hook([this](int64_t offset) { dp_grads_->grads_ready(offset); });
    const model::LossSum s = run_micro_batch(mb, iteration, true, grad_scale);
    model_->set_grads_ready_hook(nullptr);
    if (reduce) dp_grads_->finish();
    out.loss_sum += s.loss_sum;
    out.tokens += s.tokens;
  }
  const std::vector<double> totals = sum_over_dp({out.loss_sum, out.tokens});
  out.loss_sum = totals[0];
  out.tokens = totals[1];

  // Sharded: this rank holds reduced gradients for its part only, and the norm sums the parts
  // over every rank; replicated: every DP rank holds all of them, the norm sums over TP.
  const bool sharded = optimizer_->sharded();
  const auto* owned = sharded ? &dp_grads_->owned() : nullptr;
  tp_grads_->finalize(owned);
  Tensor& grads = model_->params().flat_grads();
  if (iteration == args_.inject_overflow_at) grads.data<float>()[0] = INFINITY;  // test hook
  const double sum_sq =
      sharded ? distributed::sum_over(world_.get(), {tp_grads_->local_sum_squares(owned)})[0]
              : tp_grads_->sum_squares();
  const bool finite = std::isfinite(sum_sq) && std::isfinite(out.loss_sum);
  // The gradients are of loss_sum / (GBS * T). With a loss mask (--eod-mask-loss) fewer tokens
  // count: rescale to the mean over the counted tokens of the global batch (Megatron's
  // --calculate-per-token-loss, independent of the micro-batch size). Exactly 1 without a mask.
  const double count_ratio = out.tokens > 0 ? global_tokens / out.tokens : 1.0;
  out.grad_norm = std::sqrt(sum_sq) / loss_scale * count_ratio;

  if (!finite) {
    if (args_.fp16) {
      try {
        scaler_->update(true);  // throws at the minimum scale
      } catch (const Error& e) {
        throw Error("iteration " + std::to_string(iteration) + ": " + e.what());
      }
      out.skipped = true;
      return out;
    }
    out.nan = true;
    if (!args_.skip_nan_iterations)
      throw Error("iteration " + std::to_string(iteration) + ": loss or gradients are NaN/Inf " +
                  "(lm loss " + std::to_string(out.loss_sum / out.tokens) +
                  "); weights left untouched; pass --skip-nan-iterations to skip such iterations");
    out.skipped = true;
    return out;
  }
  scaler_->update(false);
  float step_scale = static_cast<float>(count_ratio / loss_scale);
  // Megatron's clipping: scale by max_norm / (norm + 1e-6) when that is below 1.
  if (args_.clip_grad > 0) {
    const double coeff = args_.clip_grad / (out.grad_norm + 1e-6);
    if (coeff < 1.0) step_scale *= static_cast<float>(coeff);
  }
  if (zero3_) zero3_->quiesce();
  optimizer_->step(scheduler_->lr_at(optimizer_->steps()), step_scale);
  dp_grads_->gather_values();  // ZeRO 1-2: every rank's parameters whole again
  if (zero3_) zero3_->after_step();
  return out;
}

double Trainer::evaluate(int64_t iteration) {
  const data::TokenSampler* sampler = valid_data_ ? valid_data_.get() : nullptr;
  // Each pass takes the next eval_iters global batches, as Megatron's validation iterator does.
  int64_t first = evaluations_ * args_.eval_iters * args_.global_batch_size;
  if (args_.mock_data) {
    sampler = train_data_.get();
    first += train_iters_ * args_.global_batch_size;  // held out: after the training samples
  }
  if (sampler == nullptr || args_.eval_iters == 0) return NAN;
  ++evaluations_;
  const int64_t mbs = args_.micro_batch_size;
  double loss = 0, tokens = 0;
  const auto t0 = Clock::now();
  double next_progress = 5.0;
  // Each DP rank takes every DP-th micro-batch of the evaluation samples.
  const int64_t batches = args_.eval_iters * args_.num_microbatches(dp_size_);
  for (int64_t i = 0; i < batches; ++i) {
    const int64_t at = data::micro_batch_first_sample(first, i, dp_size_, dp_rank_, mbs);
    data::load_micro_batch(*sampler, at, mbs, ltor_, eval_batch_);
    const model::LossSum s = run_micro_batch(eval_batch_, iteration, false, 0.0f);
    loss += s.loss_sum;
    tokens += s.tokens;
    // Progress only when evaluation is slow enough to wonder about, a line every 5 seconds.
    if (seconds_since(t0) > next_progress) {
      std::printf("  evaluating: %lld/%lld micro-batches\n", static_cast<long long>(i + 1),
                  static_cast<long long>(batches));
      std::fflush(stdout);
      next_progress += 5.0;
    }
  }
  const std::vector<double> totals = sum_over_dp({loss, tokens});
  const double val = totals[0] / totals[1];
  std::printf("-----------------------------------------------------------------------------\n"
              " validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E |\n"
              "-----------------------------------------------------------------------------\n",
              static_cast<long long>(iteration), val, std::exp(std::min(val, 700.0)));
  if (unigram_entropy_ > 0)
    std::printf(" (unigram entropy of the training data: %.3f nats/token; validation loss is "
                "%.1f%% of it)\n", unigram_entropy_, 100.0 * val / unigram_entropy_);
  return val;
}

int64_t Trainer::train() {
  const auto& a = args_;
  const auto run_start = Clock::now();
  const double flops_per_iter =
      model_flops(a.model, model_->padded_vocab(), a.global_batch_size);
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
    m.lr = scheduler_->lr_at(std::max<int64_t>(optimizer_->steps() - 1, 0));
    m.grad_norm = step.grad_norm;
    m.loss_scale = scaler_->scale();
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
    if (exit_interval || exit_duration) {
      std::printf("> exiting after iteration %lld (%s)\n", static_cast<long long>(iteration),
                  exit_interval ? "--exit-interval" : "--exit-duration-in-mins");
      break;
    }
  }
  prefetcher_.reset();
  iteration = std::min(iteration, train_iters_);
  if (!a.export_weights.empty()) export_weights();
  return iteration;
}

void Trainer::export_weights() const {
  // Every rank takes part in gathering each parameter; the reporting rank keeps and writes them.
  std::map<std::string, Tensor> full;
  // A sharded optimizer's master weights are first gathered over DP into a whole flat buffer.
  Tensor flat_master;
  if (optimizer_->sharded()) flat_master = dp_grads_->gather_owned(optimizer_->owned_master());
  for (const model::Parameter& p : model_->params().all()) {
    const Tensor master =
        optimizer_->sharded()
            ? flat_master.slice_rows(p.offset, p.offset + p.numel()).view(p.local_shape)
            : optimizer_->master(p);
    Tensor t = distributed::gather_parameter(p, master, tp_);
    if (reporting_rank_) full[p.name] = t;
  }
  if (!reporting_rank_) return;
  const auto path = std::filesystem::path(args_.export_weights);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  checkpoint::export_hf(args_.model, model_->params(),
                        [&](const model::Parameter& p) { return full.at(p.name); },
                        args_.export_weights);
  std::printf("> exported weights to %s (+ config.json)\n", args_.export_weights.c_str());
}

namespace {

// This process's rank before MPI is up (for printing a parse error once): the launcher's
// environment, 0 when run without one.
int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

// Brings up the runtime and checks the layout; returns nullptr when the run is done
// (--print-mesh).
std::unique_ptr<comm::ParallelState> setup_distributed(const TrainArgs& args) {
  auto world = comm::ProcessGroup::world();
  comm::ProcessGroup::set_timeout(args.distributed_timeout_minutes * 60.0);
  comm::ProcessGroup::set_check_collectives(args.check_collectives);
  comm::ParallelConfig cfg;
  cfg.tensor = args.tensor_model_parallel_size;
  cfg.pipeline = args.pipeline_model_parallel_size;
  cfg.context = args.context_parallel_size;
  cfg.expert = args.expert_model_parallel_size;
  const comm::MeshLayout layout(world->size(), cfg);  // tessera::Error on sizes that do not fit
  if (args.print_mesh) {
    if (world->rank() == 0) std::printf("%s", comm::format_mesh(layout).c_str());
    return nullptr;
  }
  if (layout.pipeline() > 1 || layout.context() > 1 || layout.expert() > 1)
    throw Error("world size " + std::to_string(world->size()) + " (" + layout.summary() +
                "): this build trains tensor and data parallel only; pipeline, context and "
                "expert parallel training are not implemented yet");
  return std::make_unique<comm::ParallelState>(world, layout);
}

}  // namespace

int train_main(int argc, const char* const* argv) {
  bool runtime_up = false;
  try {
    TrainArgs args;
    if (!parse_arguments(argc, argv, args)) return 0;
    runtime_up = true;
    if (args.sequence_parallel && args.tensor_model_parallel_size == 1) {
      // As Megatron does: sequence parallelism splits over the TP group, which has one rank.
      if (launcher_rank() == 0)
        std::fprintf(stderr, "warning: --sequence-parallel has no effect with "
                             "--tensor-model-parallel-size 1; turned off\n");
      args.sequence_parallel = false;
    }
    auto state = setup_distributed(args);
    if (!state) {
      comm::shutdown();
      return 0;
    }
    const int dp = state->layout().data();
    if (args.deepspeed) {
      const std::vector<std::string> warnings = apply_deepspeed_config(args, dp);
      if (state->rank() == 0)
        for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    }
    if (args.global_batch_size == 0) args.global_batch_size = args.micro_batch_size * dp;
    validate_arguments(args, dp);
    set_num_threads(args.num_threads);
    // Rank 0 reports for the job (Megatron's print_rank_0); the others' progress lines would
    // repeat it. Errors still reach stderr from every rank.
    if (state->rank() != 0 && !std::freopen("/dev/null", "w", stdout))
      throw Error("cannot silence stdout on rank " + std::to_string(state->rank()));
    {
      TrainerGroups groups;
      groups.tp = parallel::TensorParallel(state->group(comm::GroupKind::kTensor),
                                           args.sequence_parallel);
      groups.dp = state->group(comm::GroupKind::kData);
      groups.world = state->world();
      Trainer trainer(args, groups);
      trainer.train();
    }
    state.reset();
    comm::shutdown();
    return 0;
  } catch (const Error& e) {
    std::fflush(stdout);
    // Every rank sees the same bad flag or size; one line from rank 0, exit code 2 everywhere.
    if (runtime_up) comm::abort_job(std::string("error: ") + e.what(), kUserErrorExitCode);
    if (launcher_rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return kUserErrorExitCode;
  } catch (const std::exception& e) {
    // A library's exception (e.g. std::filesystem on a path it cannot use) is still one line.
    std::fflush(stdout);
    const std::string message = std::string("error: ") + one_line(e.what());
    if (runtime_up) comm::abort_job(message, kUserErrorExitCode);
    std::fprintf(stderr, "%s\n", message.c_str());
    return kUserErrorExitCode;
  }
}

}  // namespace tessera::train
