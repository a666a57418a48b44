// The Trainer's construction, one step per function (trainer.h): check the output paths, plan
// the pipeline, build the model, the gradient sharding and the optimizer, restore a checkpoint,
// build the data (trainer_data.cc), report the setup.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>

#include "tessera/checkpoint/hf_export.h"
#include "tessera/checkpoint/sharded_checkpoint.h"
#include "tessera/comm/hosts.h"
#include "tessera/core/threads.h"
#include "tessera/distributed/sum_scalars.h"
#include "tessera/optim/deepspeed_lr_schedule.h"
#include "tessera/train/rank_layout.h"
#include "tessera/train/sharding.h"
#include "tessera/train/trainer.h"

namespace tessera::train {
namespace {

// Megatron's OptimizerParamScheduler options, counted in updates, or with `samples` in samples:
// then the sample flags as given and the iteration flags times the (final) global batch, as
// Megatron converts them (get_optimizer_param_scheduler).
optim::LRScheduleOptions schedule_options(const TrainArgs& a, int64_t train_iters, bool samples,
                                          int64_t train_samples) {
  optim::LRScheduleOptions o;
  o.lr = a.lr;
  o.min_lr = a.min_lr;
  o.decoupled_lr = a.decoupled_lr;
  o.decoupled_min_lr = a.decoupled_min_lr;
  const int64_t unit = samples ? a.global_batch_size : 1;
  o.decay_iters = a.lr_decay_samples > 0           ? a.lr_decay_samples
                  : a.lr_decay_iters > 0           ? a.lr_decay_iters * unit
                  : samples && a.train_samples > 0 ? train_samples
                                                   : train_iters * unit;
  o.warmup_iters = a.lr_warmup_fraction >= 0
                       ? optim::warmup_iters_from_fraction(a.lr_warmup_fraction, o.decay_iters)
                   : a.lr_warmup_samples > 0 ? static_cast<double>(a.lr_warmup_samples)
                                             : static_cast<double>(a.lr_warmup_iters * unit);
  o.decay_style = optim::parse_lr_decay_style(a.lr_decay_style);
  o.wsd_decay_iters =
      a.lr_wsd_decay_samples > 0 ? a.lr_wsd_decay_samples : a.lr_wsd_decay_iters * unit;
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

// Refuse now, not after hours of training: a config Transformers cannot load, or an output path
// that cannot be written.
void Trainer::check_output_paths() const {
  const auto& a = args_;
  if (!reporting_rank_) return;
  if (!a.export_weights.empty()) {
    checkpoint::check_hf_exportable(a.model);
    check_writable(a.export_weights, "--export-weights");
  }
  if (!a.timeline_file.empty()) check_writable(a.timeline_file, "--timeline-file");
  if (!a.save.empty()) check_writable(checkpoint::latest_file(a.save), "--save");
}

// Every rank writes its own files into a checkpoint and rank 0 publishes it
// (checkpoint/sharded_checkpoint.h), so --save must be one directory for all of them, which every
// rank can write: across hosts, one they share (a network file system). A directory of the same
// name on each host would leave every host's copy of the checkpoint partial, found out only when
// loading it. Rank 0 leaves a probe file there; a rank that does not see it does not share the
// directory; each rank then writes and removes a probe of its own.
void Trainer::check_save_shared() const {
  if (args_.save.empty() || !world_ || world_->size() == 1) return;
  const int rank = world_->rank();
  Tensor token = Tensor::zeros({1}, DType::kI64);
  const std::filesystem::path dir(args_.save);
  if (rank == 0) {
    token.data<int64_t>()[0] = static_cast<int64_t>(std::random_device{}() >> 1);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
  }
  world_->broadcast(token, 0).wait();
  const std::filesystem::path probe =
      dir / (".tessera-shared-probe-" + std::to_string(token.data<int64_t>()[0]));
  if (rank == 0) std::ofstream(probe) << "written by rank 0 to check that every rank sees it\n";
  world_->barrier().wait();
  // A network file system may answer from its cache of the directory for a while (NFS: up to
  // acdirmax, 60 s by default) before a new file appears: a rank that misses it asks again for
  // TESSERA_SHARED_DIR_WAIT seconds (default 65), kept below half the watchdog's timeout so
  // that the ranks already waiting in the next collective are not taken for hung.
  const char* wait_env = std::getenv("TESSERA_SHARED_DIR_WAIT");
  const double wait_s = std::min(wait_env != nullptr ? std::atof(wait_env) : 65.0,
                                 0.5 * comm::ProcessGroup::timeout());
  constexpr double kNone = 0, kUnseen = 1, kUnwritable = 2;  // each rank's slot of `problem`
  std::vector<double> problem(world_->size(), 0.0);
  std::error_code ec;
  const auto start = std::chrono::steady_clock::now();
  while (!std::filesystem::exists(probe, ec)) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= wait_s) {
      problem[rank] = kUnseen;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (problem[rank] == kNone) {
    const std::filesystem::path mine = probe.string() + "." + std::to_string(rank);
    if (!(std::ofstream(mine) << "probe\n")) problem[rank] = kUnwritable;
    std::filesystem::remove(mine, ec);
  }
  problem = distributed::sum_over(world_.get(), problem);
  if (rank == 0) std::filesystem::remove(probe, ec);
  const auto bad = std::find_if(problem.begin(), problem.end(), [](double p) { return p > 0; });
  if (bad == problem.end()) return;
  const std::vector<std::string> hosts = comm::gather_host_names(*world_);
  const int r = static_cast<int>(bad - problem.begin());
  const std::string who = "rank " + std::to_string(r) + " (host " + hosts[r] + ")";
  if (*bad == kUnwritable) throw Error("--save " + args_.save + ": " + who + " cannot write there");
  throw Error("--save " + args_.save + ": " + who + " does not see the files rank 0 (host " +
              hosts[0] +
              ") writes there; a checkpoint needs one directory shared by every host (a network "
              "file system), else each host would hold part of it");
}

// The pipeline: layers per stage (and virtual stage), this rank's part, the schedule.
Trainer::PipelinePlan Trainer::plan_pipeline() {
  const auto& a = args_;
  partition_ = {
      a.model.num_layers, pp_size_,
      pipeline::virtual_stages_for(a.model.num_layers, pp_size_, a.num_layers_per_virtual_stage),
      a.decoder_first_pipeline_num_layers, a.decoder_last_pipeline_num_layers};
  chunk_layers_ = pipeline::partition_layers(partition_);
  PipelinePlan plan;
  plan.kind = pipeline_schedule_kind(a);
  plan.shape = {pp_size_, static_cast<int>(batches_.at(0) / (a.micro_batch_size * data_size_)),
                partition_.virtual_stages};
  validate_pipeline_schedule(a, plan.kind, plan.shape, batches_, data_size_);
  return plan;
}

std::unique_ptr<model::GPTModel> Trainer::build_model(
    const distributed::ShardingPlan& sharding) const {
  const auto& a = args_;
  // ZeRO 3 initialises only the parts this rank keeps (DeepSpeed's zero.Init): the whole model
  // never exists on one rank.
  model::GPTModel::ResidentRanges resident;
  if (sharding.shards_parameters())
    resident = [this, threshold = sharding.persistence_threshold](
                   const std::vector<std::pair<int64_t, int64_t>>& units,
                   const std::vector<bool>& expert) {
      return distributed::Zero3Params::resident_ranges(units, dp_size_, dp_rank_, threshold, expert,
                                                       edp_size_, edp_rank_);
    };
  model::ModelPart part = pipeline::part_of_rank(partition_, chunk_layers_, pp_rank_);
  part.ep_size = ep_size_;
  part.ep_rank = ep_rank_;
  part.experts_whole = experts_whole_;
  context::ContextParallel cp;
  if (cp_size_ > 1) cp = context::ContextParallel(cp_, cp_comm_types(a), a.hierarchical_cp_sizes);
  // Units split evenly over the data-parallel group, and the experts' over the expert-DP group
  // too (which under expert TP 1 is not a part of it).
  const int64_t flat_multiple = std::lcm(int64_t{dp_size_}, int64_t{edp_size_});
  auto model = std::make_unique<model::GPTModel>(a.model, compute_dtype(), a.seed, tp_,
                                                 flat_multiple, part, resident, ep_, cp);
  return model;
}

std::unique_ptr<model::ChunkRunner> Trainer::build_runner() const {
  auto runner = std::make_unique<model::ChunkRunner>(*model_);
  runner->set_recompute(recompute_policy(args_));
  return runner;
}

std::vector<distributed::FlatRange> Trainer::synced_tied_embedding() const {
  const auto [begin, end] = model_->tied_embedding_range();
  if (end == 0 || !embedding_ || embedding_->size() == 1) return {};
  return {{begin, end}};
}

void Trainer::build_gradient_sharding(const distributed::ShardingPlan& sharding) {
  // The tied embedding's gradient changes after the reduction (sync_tied_embedding()): its norm
  // terms are kept apart, so an offloaded run holds only it until the step.
  tp_grads_ = std::make_unique<distributed::TensorParallelGrads>(model_->params(), tp_,
                                                                 synced_tied_embedding());
  // ZeRO 3 works per model unit (embeddings, each layer, the head): gradient buckets and
  // parameter gathers alike. A tied embedding split over the pipeline gets a bucket of its own.
  std::vector<distributed::FlatRange> units;
  if (sharding.shards_parameters()) {
    for (const auto& [b, e] : model_->units()) units.push_back({b, e});
  }
  const bool split_tied = model_->tied_embedding_range().second > 0;
  std::vector<distributed::FlatRange> experts;
  for (const auto& [b, e] : model_->expert_ranges()) experts.push_back({b, e});
  // The word embedding is reduced by rows where the reducer can (distributed/
  // data_parallel_grads.h): its backward must run inside this rank's one chunk.
  distributed::EmbeddingRowsLayout embedding_rows;
  if (model_->num_chunks() == 1) {
    const auto [begin, end] = model_->word_embedding_range();
    embedding_rows = {{begin, end},
                      model_->config().hidden_size,
                      args_.micro_batch_size * args_.model.seq_length / cp_size_};
  }
  dp_grads_ = std::make_unique<distributed::DataParallelGrads>(
      model_->params(), dp_, sharding,
      !sharding.shards_parameters() && split_tied ? unit_buckets(*model_, sharding.bucket_elems)
                                                  : units,
      edp_, experts, embedding_rows);
  if (sharding.shards_parameters()) {
    // Experts' units are sharded over the expert-DP group (as their gradients and optimizer
    // state), the others over DP.
    if (offload_->plan.param_nvme)
      param_swap_ = std::make_unique<offload::ParamSwap>(*offload_->param_dir, *offload_->io,
                                                         "params.swp", offload_->plan.param);
    zero3_ = std::make_unique<distributed::Zero3Params>(
        model_->params(), dp_, units, sharding, edp_, model_->expert_units(), param_swap_.get());
    runner_->set_param_access(zero3_.get());
    if (param_swap_) print_param_offload(*param_swap_);
  }
  const auto& a = args_;
  if (!a.dump_numerics.empty()) {
    numerics::NumericsDumpOptions o;
    o.dir = a.dump_numerics;
    o.world_rank = world_ ? world_->rank() : 0;
    o.world_size = world_size_;
    // Without sequence parallelism every TP rank holds the same residual-stream rows.
    o.writes_rows = a.sequence_parallel || tp_.rank() == 0;
    o.layout = "tp" + std::to_string(tp_.size()) + ".pp" + std::to_string(pp_size_) + ".vp" +
               std::to_string(model_->num_chunks()) + ".cp" + std::to_string(cp_size_) + ".dp" +
               std::to_string(data_size_) + ".ep" + std::to_string(ep_size_) + ".sp" +
               (a.sequence_parallel ? "1" : "0") + ".mbs" + std::to_string(a.micro_batch_size) +
               ".zero" + std::to_string(static_cast<int>(sharding.stage)) + "." +
               dtype_name(model_->params().compute_dtype());
    o.fault_layer = a.inject_grad_ulp_layer;
    o.plants_fault = tp_.rank() == 0 && cp_rank_ == 0;
    o.num_layers = a.model.num_layers;
    numerics_ = std::make_unique<numerics::NumericsDump>(std::move(o));
    runner_->set_probe(numerics_.get());
  }
}

std::unique_ptr<distributed::DistributedOptimizer> Trainer::build_optimizer(
    const distributed::ShardingPlan& sharding) {
  const auto& a = args_;
  optim::Optimizer::Ranges owned;
  if (sharding.shards_optimizer_state())
    for (const auto& r : dp_grads_->owned()) owned.push_back({r.begin, r.end});
  std::unique_ptr<optim::StateStorage> storage;
  offload::NvmeStateStorage* nvme = nullptr;
  if (offload_->plan.optimizer_nvme) {
    offload::NvmeStateOptions options = offload_->plan.state;
    if (world_ && world_->size() > 1) {  // the ranks sharing this host's memory
      const std::vector<std::string> hosts = comm::gather_host_names(*world_);
      options.ranks_on_host =
          static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[world_->rank()]));
    }
    auto s = std::make_unique<offload::NvmeStateStorage>(
        *offload_->optimizer_dir, *offload_->io, "optimizer_state.swp", options);
    nvme = s.get();
    storage = std::move(s);
  }
  // With the parameters on NVMe the model's buffer holds the owned values only around their
  // use: the fp32 master weights are the optimizer's own copy (DeepSpeed's), whatever the dtype.
  const bool separate_master = offload_->plan.param_nvme;
  auto optimizer = std::make_unique<optim::Optimizer>(
      model_->params(),
      optim::OptimizerOptions{a.optimizer == "sgd" ? "sgd" : "adam", a.adam_beta1, a.adam_beta2,
                              a.adam_eps, a.sgd_momentum, a.weight_decay, separate_master},
      owned, std::move(storage));
  if (nvme && a.async_save)
    std::printf(
        "note: --async-save: the optimizer state is on NVMe, where each step rewrites it in "
        "place, and a background copy of it may not fit in memory: checkpoints are streamed from "
        "it synchronously\n");
  optimizer_nvme_ = nvme;
  std::unique_ptr<optim::LRSchedule> schedule;
  if (a.deepspeed_schedule) {
    schedule = std::make_unique<optim::DeepSpeedLRSchedule>(*a.deepspeed_schedule);
  } else {
    schedule = std::make_unique<optim::LRScheduler>(
        schedule_options(a, train_iters_, samples_schedule_, a.train_samples));
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
  auto out = std::make_unique<distributed::DistributedOptimizer>(
      model_->params(), std::move(optimizer), std::move(schedule), std::move(scaler), *tp_grads_,
      *dp_grads_, zero3_.get(), world_, model_group_,
      distributed::StepPolicy{a.clip_grad, a.fp16, a.skip_nan_iterations, a.inject_overflow_at,
                              a.log_num_zeros_in_grad});
  if (!model_->expert_ranges().empty()) {
    std::vector<distributed::FlatRange> experts;
    for (const auto& [b, e] : model_->expert_ranges()) experts.push_back({b, e});
    out->set_experts(std::move(experts), expert_model_, tp_.rank() == 0);
  }
  if (nvme) {
    // Gradients still changed after the data-parallel reduction: the tensor-parallel completion
    // and the tied embedding's sum between the pipeline's ends (sync_tied_embedding()).
    std::vector<distributed::FlatRange> late = tp_grads_->finalized_ranges();
    for (const distributed::FlatRange& r : synced_tied_embedding()) late.push_back(r);
    const std::vector<distributed::FlatRange>& owned_ranges = dp_grads_->owned();
    grad_offload_ = std::make_unique<distributed::GradientOffload>(
        model_->params(), *nvme, owned_ranges, tp_grads_->counted_ranges(&owned_ranges), late,
        a.log_num_zeros_in_grad);
    out->set_gradient_offload(grad_offload_.get());
    dp_grads_->set_boundary_hook(
        [g = grad_offload_.get()](const distributed::FlatRange& part) { g->part_final(part); });
    print_optimizer_offload(*nvme);
  }
  return out;
}

namespace {

// "io_uring I/O", or "threads I/O (fell back: WHY)": the tail of both offload lines.
std::string io_engine_text(const OffloadRuntime& rt) {
  const std::string& why = rt.io->fallback_reason();
  return std::string(rt.io->backend()) + " I/O" + (why.empty() ? "" : " (fell back: " + why + ")");
}

}  // namespace

void Trainer::print_optimizer_offload(const offload::NvmeStateStorage& state) const {
  const OffloadRuntime& rt = *offload_;
  std::printf(
      "> offload: optimizer state on NVMe under %s: %.3f GB swap files per rank (this rank: "
      "%lld elements in %lld sub-groups of %lld; fp32 gradients too, from the accumulation "
      "boundary, %lld of them held until the step), %d buffers (%.3f MB), pipeline read %s / write "
      "%s, "
      "%s\n",
      rt.plan.optimizer_path.c_str(), state.file_bytes() / 1e9,
      static_cast<long long>(state.numel()), static_cast<long long>(state.sub_groups()),
      static_cast<long long>(state.sub_group_elems()),
      static_cast<long long>(grad_offload_->held_elements()), rt.plan.state.buffer_count,
      state.buffer_bytes() / 1e6, rt.plan.state.pipeline_read ? "on" : "off",
      rt.plan.state.pipeline_write ? "on" : "off", io_engine_text(rt).c_str());
}

void Trainer::print_param_offload(const offload::ParamSwap& swap) const {
  const OffloadRuntime& rt = *offload_;
  std::printf(
      "> offload: parameters on NVMe under %s: %.3f GB swap file per rank (this rank: %d units "
      "swapped, %lld elements), %lld elements resident (max_in_cpu %lld), %d buffers (%.3f MB), "
      "%s\n",
      rt.plan.param_path.c_str(), swap.file_bytes() / 1e9, swap.swapped_units(),
      static_cast<long long>(swap.swapped_elems()), static_cast<long long>(swap.kept_elems()),
      static_cast<long long>(rt.plan.param.max_in_cpu), rt.plan.param.buffer_count,
      swap.buffer_bytes() / 1e6, io_engine_text(rt).c_str());
}

DType Trainer::compute_dtype() const { return compute_dtype_of(args_); }

// Expert parallelism: what this rank holds of its stage's experts, measured (the parameters it
// declared, the optimizer state it owns) against the formula (the stage's experts / (EP x expert
// TP), and / EDP more for sharded optimizer state). Every expert-parallel rank holds the same
// amount.
void Trainer::print_expert_memory(const distributed::ShardingPlan& sharding) const {
  int64_t held = 0, owned_state = 0;
  for (const model::Parameter& p : model_->params().all())
    if (p.expert) held += p.numel();
  for (const auto& [b, e] : model_->expert_ranges())
    for (const auto& r : dp_grads_->owned())
      owned_state += std::max<int64_t>(0, std::min(e, r.end) - std::max(b, r.begin));
  const model::ParameterSet stage = model::GPTModel::declare_part(
      args_.model, tp_.size(), 0, pipeline::part_of_rank(partition_, chunk_layers_, pp_rank_));
  int64_t all = 0;  // the stage's experts, whole
  for (const model::Parameter& p : stage.all())
    if (p.name.find(".experts.") != std::string::npos) all += p.global_numel();
  if (all == 0) {
    std::printf("> expert parallel: EP %d x EDP %d; no MoE layers on this pipeline stage\n",
                ep_size_, edp_size_);
    return;
  }
  const int expert_tp = experts_whole_ ? 1 : tp_.size();
  const double params_formula = static_cast<double>(all) / (ep_size_ * expert_tp);
  const double state_formula = params_formula / (sharding.shards_optimizer_state() ? edp_size_ : 1);
  // ZeRO 3: what of the experts' parameters stays between uses (their units' owned parts).
  std::string zero3;
  if (zero3_) {
    int64_t kept = 0;
    for (size_t u = 0; u < model_->units().size(); ++u)
      if (model_->expert_units()[u]) kept += zero3_->kept_elems(static_cast<int>(u));
    const double formula = params_formula / edp_size_;
    char line[160];
    std::snprintf(line, sizeof line,
                  "; ZeRO 3 keeps %lld of them between uses (formula %.0f = the above / EDP, "
                  "ratio %.4f)",
                  static_cast<long long>(kept), formula, static_cast<double>(kept) / formula);
    zero3 = line;
  }
  std::printf(
      "> expert parallel: EP %d x expert TP %d x EDP %d; this rank holds %d of %d experts per MoE "
      "layer: %lld expert parameters and gradients (formula %.0f = %lld / (EP x expert TP), ratio "
      "%.4f), optimizer state for %lld of them (formula %.0f, ratio %.4f)%s\n",
      ep_size_, expert_tp, edp_size_, args_.model.moe.num_experts / ep_size_,
      args_.model.moe.num_experts, static_cast<long long>(held), params_formula,
      static_cast<long long>(all), static_cast<double>(held) / params_formula,
      static_cast<long long>(owned_state), state_formula,
      static_cast<double>(owned_state) / state_formula, zero3.c_str());
}

void Trainer::print_setup(const distributed::ShardingPlan& sharding) const {
  const auto& a = args_;
  std::printf(
      "> model: %s family, %lld parameters (%d layers, hidden %d, heads %d/%d, ffn %d, "
      "vocab %lld padded to %lld), compute %s, %d threads\n",
      a.model.family() == model::Family::kGpt2 ? "GPT-2" : "LLaMA",
      static_cast<long long>(a.model.num_parameters()), a.model.num_layers, a.model.hidden_size,
      a.model.num_attention_heads, a.model.kv_heads(), a.model.ffn(),
      static_cast<long long>(a.model.vocab_size), static_cast<long long>(model_->padded_vocab()),
      dtype_name(compute_dtype()), num_threads());
  if (a.model.moe.enabled()) {
    const std::vector<bool> mask = a.model.moe_layer_mask();
    const int moe_layers = static_cast<int>(std::count(mask.begin(), mask.end(), true));
    const std::string shared =
        a.model.moe.shared_expert_size > 0
            ? ", a shared expert of ffn " + std::to_string(a.model.moe.shared_expert_size)
            : "";
    std::printf(
        "> moe: %d of %d layers with %d experts of ffn %d, top %d%s; %lld parameters "
        "active per token\n",
        moe_layers, a.model.num_layers, a.model.moe.num_experts, a.model.moe_ffn(),
        a.model.moe.topk, shared.c_str(), static_cast<long long>(a.model.num_active_parameters()));
  }
  if (ep_size_ > 1 || experts_whole_) print_expert_memory(sharding);
  if (tp_.size() > 1)
    std::printf("> tensor parallel: %d ranks%s, %lld parameters (with padding) on each rank\n",
                tp_.size(), tp_.sequence_parallel() ? " with sequence parallelism" : "",
                static_cast<long long>(model_->params().numel()));
  if (cp_size_ > 1) {
    std::string types;
    for (const std::string& t : a.cp_comm_type) types += (types.empty() ? "" : ",") + t;
    std::printf(
        "> context parallel: %d ranks, communication %s, %lld of %lld tokens per sequence on "
        "each rank (chunks r and 2N-1-r of 2N)\n",
        cp_size_, types.c_str(), static_cast<long long>(a.model.seq_length / cp_size_),
        static_cast<long long>(a.model.seq_length));
  }
  if (dp_size_ > 1)
    std::printf(
        "> data parallel: %d ranks%s, %lld micro-batches of %lld per rank per iteration, "
        "ZeRO stage %d, %d gradient bucket(s), overlap %s%s\n",
        data_size_,
        cp_size_ > 1 ? (" (gradients reduced and sharded over data x context = " +
                        std::to_string(dp_size_) + " ranks)")
                           .c_str()
                     : "",
        static_cast<long long>(a.num_microbatches(data_size_)),
        static_cast<long long>(a.micro_batch_size), sharding.zero_stage(), dp_grads_->num_buckets(),
        !a.overlap_grad_reduce          ? "off"
        : partition_.virtual_stages > 1 ? "off (virtual stages: after each micro-batch)"
                                        : "on",
        sharding.grad_reduce_dtype == DType::kF32
            ? ""
            : (std::string(", reduced in ") + dtype_name(sharding.grad_reduce_dtype)).c_str());
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
        layers.c_str(), static_cast<long long>(a.num_microbatches(data_size_)));
  }
  if (a.recompute_granularity == "full")
    std::printf("> activation recomputation: full, %s, %d layer(s)\n", a.recompute_method.c_str(),
                a.recompute_num_layers);
  if (a.recompute_granularity == "selective")
    std::printf("> activation recomputation: selective (attention core)\n");
  std::fflush(stdout);
}

}  // namespace tessera::train
