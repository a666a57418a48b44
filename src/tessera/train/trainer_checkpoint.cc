// Trainer's checkpoints: what a rank saves (the slices of master weights and optimizer state it
// owns, each element written by exactly one rank of the job), the run state, synchronous and
// background saves, and loading into this run's layout (checkpoint/sharded_checkpoint.h).
//
// How a rank's file is written: with the optimizer state in memory, a snapshot (copies of the
// slices) is taken and written, in the background with --async-save. With the state on NVMe
// (offload/nvme_state_storage.h), which may exceed memory and which the next step rewrites in
// place, the file is streamed during the save (checkpoint/rank_file_writer.h): each piece of
// state goes to the file from the sub-group window the optimizer's visit holds, so the save
// holds no copy (--async-save too: it saves synchronously, as the build's note says).
//
// Who writes an element (each exactly once): tensor-parallel rank 0 for a parameter replicated
// over TP, the first replica of a replicated key/value head (saved_slice); the first pipeline
// stage for a tied embedding (the last stage's copy is equal); under ZeRO >= 1 the data-parallel
// rank that owns it, under ZeRO 0 data-parallel rank d writes part d of every parameter, so
// every rank writes a share. An expert-parallel expert is held by its expert-data-parallel group
// only: the rank of that group that owns the element (ZeRO >= 1), or expert-DP rank d part d.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>

#include "tessera/checkpoint/hf_import.h"
#include "tessera/checkpoint/rank_file_writer.h"
#include "tessera/checkpoint/run_state.h"
#include "tessera/checkpoint/sharded_checkpoint.h"
#include "tessera/core/clock.h"
#include "tessera/core/file_io.h"
#include "tessera/distributed/sum_scalars.h"
#include "tessera/train/trainer.h"

namespace tessera::train {
namespace {

std::string state_tensor_name(const std::string& state, const std::string& param) {
  return "optimizer." + state + "." + param;
}

// The part of this rank's slice [begin, end) of p that it writes: none for a tied copy or, off
// tensor-parallel rank 0, a parameter replicated over TP; otherwise the slice without the
// pieces other ranks hold first (a key/value head replicated over several ranks is written by
// its first replica; a fused q/k/v weight has such pieces next to ones only this rank holds).
// Elements of dropped pieces map to no run, so they are neither written nor described.
std::optional<checkpoint::TensorSlice> saved_slice(const model::Parameter& p, int tp_rank,
                                                   int64_t begin, int64_t end) {
  if (p.tied_copy || (p.shard.tp_dim < 0 && tp_rank != 0 && !p.tp_distinct)) return std::nullopt;
  checkpoint::TensorSlice s = checkpoint::TensorSlice::of(p, begin, end);
  if (p.shard.tp_dim >= 0) {
    s.pieces.clear();
    for (const model::ShardPiece& piece : p.pieces)
      if (piece.replica_rank == 0)
        s.pieces.push_back({piece.global_begin, piece.local_begin, piece.length});
    if (s.pieces.empty()) return std::nullopt;
  }
  return s;
}

// What of its owned runs this rank writes (the file comment).
struct SaveShare {
  int tp_rank = 0;
  bool split = false;       // ZeRO 0: each data-parallel rank writes its part of every parameter
  int parts = 1, part = 0;  // the gradient group (data x context): part `part` of `parts`
  int expert_parts = 1, expert_part = 0;  // an expert-parallel expert's: its expert-DP group
};

// The slice this rank writes of p's shard elements [begin, end) (an owned run or a piece of one:
// the slice of a piece is the piece of the run's slice), nullopt when it writes none of them.
std::optional<checkpoint::TensorSlice> written_slice(const model::Parameter& p,
                                                     const SaveShare& share, int64_t begin,
                                                     int64_t end) {
  const int parts = p.expert ? share.expert_parts : share.parts;
  const int part = p.expert ? share.expert_part : share.part;
  if (share.split && parts > 1) {
    begin = std::max(begin, p.numel() * part / parts);
    end = std::min(end, p.numel() * (part + 1) / parts);
  }
  if (begin >= end) return std::nullopt;
  return saved_slice(p, share.tp_rank, begin, end);
}

// The tensors saved of p: its master weights, then each optimizer state in `states`.
std::vector<std::string> saved_tensors(const model::Parameter& p,
                                       const std::vector<std::string>& states) {
  std::vector<std::string> names{p.name};
  for (const std::string& s : states) names.push_back(state_tensor_name(s, p.name));
  return names;
}

// Calls fn(piece, name, slice, data) for each tensor slice this rank writes of each piece of the
// owned runs (the master weights, then each state of `states`), window by window, while the
// piece's state is resident (data: the slice's elements in that window).
using SavedFn = std::function<void(const optim::Optimizer::StateRun&, const std::string&,
                                   const checkpoint::TensorSlice&, const float*)>;
void for_each_saved(optim::Optimizer& optimizer, const SaveShare& share,
                    const std::vector<std::string>& states, const SavedFn& fn) {
  optimizer.visit_state_runs(optim::StateAccess::kRead, [&](const optim::Optimizer::StateRun& run) {
    const model::Parameter& p = *run.param;
    const int64_t begin = run.begin - p.offset;
    const std::optional<checkpoint::TensorSlice> slice =
        written_slice(p, share, begin, run.end - p.offset);
    if (!slice) return;
    const int64_t skip = slice->flat_begin - begin;
    const std::vector<std::string> names = saved_tensors(p, states);
    fn(run, names[0], *slice, run.master + skip);
    for (size_t k = 0; k < states.size(); ++k) fn(run, names[k + 1], *slice, run.state[k] + skip);
  });
}

struct StreamedFile {
  int64_t bytes = 0;                 // of slice data
  int64_t largest_window_bytes = 0;  // the most written from one window of the visit
};

// Writes this rank's file into `dir`, streamed (checkpoint/rank_file_writer.h): every slice
// declared from the owned runs, then each piece written from the window the optimizer's visit
// holds. Copies no state.
StreamedFile stream_rank_file(optim::Optimizer& optimizer, const SaveShare& share,
                              const std::vector<std::string>& states, const std::string& dir,
                              int world_rank, const io::DirectFileWriter::Options& io) {
  checkpoint::RankFileWriter writer(checkpoint::RankFileWriter::WriteMode::kDirectWhereSupported,
                                    io);
  for (const optim::Optimizer::OwnedRun& run : optimizer.owned_runs()) {
    const model::Parameter& p = *run.param;
    if (const auto slice = written_slice(p, share, run.begin - p.offset, run.end - p.offset))
      for (const std::string& name : saved_tensors(p, states)) writer.declare(name, *slice);
  }
  writer.open(dir, world_rank);
  StreamedFile out;
  int64_t window = -1, window_bytes = 0;
  auto write = [&](const optim::Optimizer::StateRun& run, const std::string& name,
                   const checkpoint::TensorSlice& slice, const float* data) {
    writer.write(name, slice.flat_begin, data, slice.numel());
    if (run.window != window) {
      window = run.window;
      window_bytes = 0;
    }
    window_bytes += slice.numel() * static_cast<int64_t>(sizeof(float));
    out.largest_window_bytes = std::max(out.largest_window_bytes, window_bytes);
  };
  for_each_saved(optimizer, share, states, write);
  writer.commit();
  out.bytes = writer.bytes();
  return out;
}

}  // namespace

nlohmann::json Trainer::run_state(int64_t iteration) const {
  const auto& a = args_;
  return {
      {"iteration", iteration},
      {"consumed_samples", consumed_samples_},
      {"evaluations", evaluations_},
      {"seed", seed_},
      {"optimizer",
       {{"kind", optimizer_->optimizer().kind()},
        {"steps", optimizer_->optimizer().steps()},
        {"schedule_position", optimizer_->schedule_position()},
        {"schedule_unit", samples_schedule_ ? "samples" : "updates"},
        {"saved", !a.no_save_optim}}},
      // The schedule is a function of the step count and this run's flags (a resumed run takes
      // its flags, as Megatron with --override-opt_param-scheduler); where it stood is recorded.
      {"lr_scheduler",
       {{"next_lr", optimizer_->schedule().lr_at(optimizer_->schedule_position())},
        {"lr", a.lr},
        {"min_lr", a.min_lr},
        {"decay_style", a.lr_decay_style},
        {"warmup_iters", a.lr_warmup_iters},
        {"decay_iters", a.lr_decay_iters > 0 ? a.lr_decay_iters : train_iters_},
        {"deepspeed_scheduler", a.deepspeed_schedule.has_value()}}},
      {"loss_scaler", checkpoint::loss_scaler_to_json(optimizer_->scaler().state())},
      {"model", checkpoint::model_config_to_json(a.model)},
      {"layout",
       {{"world_size", world_size_},
        {"tensor_model_parallel_size", tp_.size()},
        {"pipeline_model_parallel_size", pp_size_},
        {"virtual_pipeline_stages", partition_.virtual_stages},
        {"data_parallel_size", data_size_},
        {"context_parallel_size", cp_size_},
        {"expert_model_parallel_size", ep_size_},
        {"zero_stage", dp_grads_->plan().zero_stage()}}},
      {"args",
       {{"micro_batch_size", a.micro_batch_size},
        {"global_batch_size", a.global_batch_size},
        {"train_iters", train_iters_},
        {"weight_decay", a.weight_decay},
        {"clip_grad", a.clip_grad},
        {"precision", a.bf16   ? "bf16"
                      : a.fp16 ? "fp16"
                               : "fp32"}}}};
}

void Trainer::save_checkpoint(int64_t iteration) {
  const auto& a = args_;
  finish_pending_save(true);  // one save at a time
  const auto t0 = Clock::now();
  const int world_rank = world_ ? world_->rank() : 0;
  if (world_rank == 0) checkpoint::prepare_staging(a.save, iteration);
  if (world_) world_->barrier().wait();  // the staging directory exists before anyone writes

  optim::Optimizer& optimizer = optimizer_->optimizer();
  const SaveShare share{tp_.rank(), !optimizer.sharded(), dp_size_, dp_rank_, edp_size_, edp_rank_};
  const std::vector<std::string> states =
      a.no_save_optim ? std::vector<std::string>{} : optimizer.state_names();

  pending_save_ = std::make_unique<PendingSave>();
  PendingSave& pending = *pending_save_;
  pending.iteration = iteration;
  pending.state = run_state(iteration);
  if (const nlohmann::json bias = expert_bias_to_json(*model_, pp_.get()); !bias.is_null())
    pending.state["moe_expert_bias"] = bias;
  pending.start = t0;
  const std::string dir = checkpoint::staging_dir(a.save, iteration);
  const bool victim = iteration == a.kill_during_save_at && world_rank == world_size_ - 1;
  // Test hook: this rank dies after its file is complete but before the others have published
  // (rank 0 waits for it), as a node failing mid-save.
  auto die_if_victim = [victim] {
    if (victim) std::raise(SIGKILL);
  };

  // The rank file goes through O_DIRECT on the run's `aio` settings and back end.
  io::DirectFileWriter::Options io;
  io.aio = offload_->plan.aio;
  io.backend = offload_->plan.backend;
  if (!optimizer.storage().resident()) {
    // The state is on NVMe, where it may not fit in memory, and the next step rewrites it in
    // place: the file is streamed now, each piece written from the window the visit holds.
    const StreamedFile file = stream_rank_file(optimizer, share, states, dir, world_rank, io);
    pending.bytes = file.bytes;
    pending.held_bytes = file.largest_window_bytes;
    pending.streamed = true;
    die_if_victim();
    finish_pending_save(true);
    return;
  }

  // The snapshot: copies of this rank's slices, taken before training changes them.
  auto snapshot = std::make_shared<checkpoint::RankSnapshot>();
  auto add = [&](const optim::Optimizer::StateRun&, const std::string& name,
                 const checkpoint::TensorSlice& slice,
                 const float* data) { snapshot->add(name, slice, data); };
  for_each_saved(optimizer, share, states, add);
  pending.snapshot_s = seconds_since(t0);
  pending.bytes = pending.held_bytes = snapshot->bytes();
  auto write = [snapshot, dir, world_rank, die_if_victim, io] {
    snapshot->write(dir, world_rank, io);
    die_if_victim();
  };
  if (a.async_save) {
    pending.writer = std::async(std::launch::async, [write] {
      // The writer yields the cores to training: at the lowest priority it runs when the
      // compute threads wait (communication, data), instead of time-slicing with them.
      setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
      write();
    });
  } else {
    write();
    finish_pending_save(true);
  }
}

void Trainer::finish_pending_save(bool wait) {
  if (!pending_save_) return;
  PendingSave& pending = *pending_save_;
  const bool async = pending.writer.valid();
  if (async) {
    // Every rank asks at the same iterations; the checkpoint is published once all are done.
    if (wait) pending.writer.wait();
    const bool done = pending.writer.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    if (distributed::sum_over(world_.get(), {done ? 0.0 : 1.0})[0] > 0) return;
    pending.writer.get();  // rethrows a write error of this rank
  }
  const double write_s = seconds_since(pending.start);
  double bytes = 0, held = 0;
  for (const std::vector<double>& r : distributed::gather_over(
           world_.get(),
           {static_cast<double>(pending.bytes), static_cast<double>(pending.held_bytes)})) {
    bytes += r[0];
    held = std::max(held, r[1]);
  }
  const int world_rank = world_ ? world_->rank() : 0;
  if (world_rank == 0) {
    // A tokenizer.json travels with the checkpoint, so tessera-convert hands it to Hugging Face.
    const std::filesystem::path tokenizer = args_.tokenizer_model;
    if (args_.tokenizer_type == "HuggingFaceTokenizer" && tokenizer.filename() == "tokenizer.json")
      copy_file_atomically(
          tokenizer.string(),
          (std::filesystem::path(checkpoint::staging_dir(args_.save, pending.iteration)) /
           "tokenizer.json")
              .string());
    checkpoint::publish_checkpoint(args_.save, pending.iteration, world_size_, pending.state,
                                   args_.keep_checkpoints);
    const double total_s = seconds_since(pending.start);
    std::printf(
        "> saved checkpoint at iteration %lld to %s: %.3f GB in %.2f s (%.2f GB/s, files "
        "written in %.2f s); training paused %.3f s for the %s; state held for it: %.3f MB per "
        "rank at most (%s)\n",
        static_cast<long long>(pending.iteration), args_.save.c_str(), bytes / 1e9, total_s,
        bytes / 1e9 / total_s, write_s, async ? pending.snapshot_s : total_s,
        async ? "snapshot (--async-save)" : "save", held / 1e6,
        pending.streamed ? "streamed from NVMe, one window at a time" : "a copy in memory");
    std::fflush(stdout);
  }
  // The next save must not start (and a later load not look) before this one is published.
  if (world_) world_->barrier().wait();
  pending_save_.reset();
}

void Trainer::after_master_loaded() { optimizer_->refresh_values(); }

void Trainer::load_hf_weights() {
  const auto t0 = Clock::now();
  // Every rank converts the whole model and keeps its slices (an HF model is one process's
  // files; its size is what a single device loads).
  const std::map<std::string, Tensor> weights =
      checkpoint::read_hf_weights(args_.load, args_.model);
  optimizer_->optimizer().visit_state_runs(
      optim::StateAccess::kReadWrite, [&](const optim::Optimizer::StateRun& run) {
        const model::Parameter& p = *run.param;
        const Tensor& w = weights.at(p.name);
        const checkpoint::TensorSlice slice =
            checkpoint::TensorSlice::of(p, run.begin - p.offset, run.end - p.offset);
        const std::vector<checkpoint::Run> needed = checkpoint::runs(slice);
        checkpoint::copy_overlap(checkpoint::runs(checkpoint::TensorSlice::whole(w.shape())),
                                 w.raw(), needed, run.master, sizeof(float));
      });
  after_master_loaded();
  std::printf("> loaded Hugging Face weights from %s in %.2f s; training starts at iteration 1\n",
              args_.load.c_str(), seconds_since(t0));
}

namespace {

// The run state of a checkpoint as the loader needs it.
struct SavedRun {
  bool release = false;  // weights only (tessera-convert from Hugging Face), as Megatron's
  bool saved_optim = false;
  std::string optimizer_kind;
  int64_t steps = 0, iteration = 0, consumed_samples = 0, evaluations = 0;
  // Where the learning-rate schedule stood, in its unit ("updates" or "samples"); absent in
  // checkpoints from before sample-based schedules (-1: the updates).
  int64_t schedule_position = -1;
  std::string schedule_unit = "updates";
  uint64_t seed = 0;
  nlohmann::json loss_scaler;
  std::string layout;  // "TP 2 PP 2 DP 2 ZeRO 1", for the log line
};

// Parses metadata.json's "state"; tessera::Error naming `where` for anything missing, mistyped
// or negative.
SavedRun parse_saved_run(const nlohmann::json& st, const std::string& where) {
  SavedRun r;
  try {
    r.release = st.value("release", false);
    const nlohmann::json& optimizer = st.at("optimizer");
    r.saved_optim = optimizer.at("saved").get<bool>();
    r.optimizer_kind = optimizer.at("kind").get<std::string>();
    r.steps = optimizer.at("steps").get<int64_t>();
    r.schedule_position = optimizer.value("schedule_position", int64_t{-1});
    r.schedule_unit = optimizer.value("schedule_unit", std::string("updates"));
    r.iteration = st.at("iteration").get<int64_t>();
    if (!r.release) {
      r.consumed_samples = st.at("consumed_samples").get<int64_t>();
      r.evaluations = st.at("evaluations").get<int64_t>();
      r.seed = st.at("seed").get<uint64_t>();
      r.loss_scaler = st.at("loss_scaler");
    }
    const nlohmann::json& l = st.at("layout");
    r.layout = "TP " + std::to_string(l.at("tensor_model_parallel_size").get<int>()) + " PP " +
               std::to_string(l.at("pipeline_model_parallel_size").get<int>()) + " DP " +
               std::to_string(l.at("data_parallel_size").get<int>()) +
               (l.value("context_parallel_size", 1) > 1
                    ? " CP " + std::to_string(l.at("context_parallel_size").get<int>())
                    : "") +
               (l.value("expert_model_parallel_size", 1) > 1
                    ? " EP " + std::to_string(l.at("expert_model_parallel_size").get<int>())
                    : "") +
               " ZeRO " + std::to_string(l.at("zero_stage").get<int>());
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": invalid run state (" + e.what() + ")");
  }
  if (r.steps < 0 || r.iteration < 0 || r.consumed_samples < 0 || r.evaluations < 0)
    throw Error(where + ": negative iteration, consumed_samples, evaluations or optimizer steps");
  return r;
}

}  // namespace

uint64_t Trainer::load_checkpoint() {
  const auto& a = args_;
  if (checkpoint::is_hf_directory(a.load)) {
    load_hf_weights();
    return a.seed;
  }
  const auto t0 = Clock::now();
  std::optional<std::string> dir =
      a.load.empty() ? std::nullopt : checkpoint::find_checkpoint(a.load);
  bool from_pretrained = false;
  if (!dir && !a.pretrained_checkpoint.empty()) {
    // Megatron: with nothing in --load, finetune from --pretrained-checkpoint.
    dir = checkpoint::find_checkpoint(a.pretrained_checkpoint);
    if (!dir)
      throw Error("no checkpoint in --load " + a.load + " nor in --pretrained-checkpoint " +
                  a.pretrained_checkpoint);
    std::printf("> no checkpoint in --load %s: finetuning from --pretrained-checkpoint %s\n",
                a.load.c_str(), a.pretrained_checkpoint.c_str());
    from_pretrained = true;
  }
  if (!dir) {
    if (a.exit_on_missing_checkpoint)
      throw Error("--load " + a.load + " holds no checkpoint (--exit-on-missing-checkpoint)");
    std::printf("> no checkpoint in --load %s: starting from scratch\n", a.load.c_str());
    return a.seed;
  }
  checkpoint::CheckpointReader reader(*dir);
  const std::string where = *dir + "/metadata.json";
  const SavedRun saved = parse_saved_run(reader.state(), where);
  const bool finetune = a.finetune || saved.release || from_pretrained;
  const bool load_optim = !finetune && !a.no_load_optim;
  const std::string& kind = optimizer_->optimizer().kind();
  if (load_optim && !saved.saved_optim)
    throw Error(*dir +
                " holds no optimizer state (saved with --no-save-optim): pass "
                "--no-load-optim or --finetune to load the weights only");
  if (load_optim && saved.optimizer_kind != kind)
    throw Error(*dir + " holds " + saved.optimizer_kind +
                " optimizer state but this run uses --optimizer " + kind +
                ": pass --no-load-optim to start the optimizer afresh");

  const std::vector<std::string> state_names = optimizer_->optimizer().state_names();
  int64_t elements = 0;
  optimizer_->optimizer().visit_state_runs(
      optim::StateAccess::kReadWrite, [&](const optim::Optimizer::StateRun& run) {
        const model::Parameter& p = *run.param;
        const checkpoint::TensorSlice slice =
            checkpoint::TensorSlice::of(p, run.begin - p.offset, run.end - p.offset);
        reader.read(p.name, slice, run.master);
        elements += slice.numel();
        if (load_optim)
          for (size_t k = 0; k < state_names.size(); ++k) {
            reader.read(state_tensor_name(state_names[k], p.name), slice, run.state[k]);
            elements += slice.numel();
          }
      });
  after_master_loaded();
  // The expert biases are model state outside the optimizer: loaded with the weights.
  if (model_->config().moe.expert_bias && reader.state().contains("moe_expert_bias"))
    expert_bias_from_json(*model_, reader.state().at("moe_expert_bias"), where);
  if (load_optim) {
    optimizer_->optimizer().set_steps(saved.steps);
    // The schedule continues where it stood; saved in the other unit, the updates' samples are
    // the consumed samples (exact unless updates were skipped).
    const bool same_unit = saved.schedule_unit == (samples_schedule_ ? "samples" : "updates");
    optimizer_->set_schedule_position(same_unit && saved.schedule_position >= 0
                                          ? saved.schedule_position
                                      : samples_schedule_ ? saved.consumed_samples
                                                          : saved.steps);
    if (optimizer_->scaler().is_dynamic()) {
      const optim::LossScalerState s0 = checkpoint::loss_scaler_from_json(saved.loss_scaler, where);
      if (s0.dynamic) {
        // The schedule's settings are this run's flags; where it stands comes from the run.
        optim::LossScalerState s = optimizer_->scaler().state();
        s.scale = s0.scale;
        s.cur_hysteresis = std::min(s0.cur_hysteresis, s.hysteresis);
        s.cur_iter = s0.cur_iter;
        s.last_overflow_iter = s0.last_overflow_iter;
        optimizer_->set_scaler_state(s);
      }
    }
  }
  std::string what = saved.release ? "weights (release checkpoint)" : "weights";
  uint64_t seed = a.seed;
  if (!finetune) {
    // The seed decides dropout masks and the data order (the datasets are built after this).
    if (!a.no_load_rng) seed = saved.seed;
    resume_at(saved.iteration, saved.consumed_samples);
    evaluations_ = saved.evaluations;  // validation samples consumed, as Megatron restores them
    what += load_optim ? ", optimizer state" : "";
    what += ", data position" + std::string(a.no_load_rng ? "" : " and seed");
  }
  const double bytes =
      distributed::sum_over(world_.get(), {static_cast<double>(elements) * sizeof(float)})[0];
  const double seconds = seconds_since(t0);
  std::printf(
      "> loaded %s from %s (iteration %lld, saved under %s) into TP %d PP %d DP %d%s: %.3f GB "
      "in %.2f s (%.2f GB/s)\n",
      what.c_str(), dir->c_str(), static_cast<long long>(saved.iteration), saved.layout.c_str(),
      tp_.size(), pp_size_, data_size_,
      cp_size_ > 1 ? (" CP " + std::to_string(cp_size_)).c_str() : "", bytes / 1e9, seconds,
      bytes / 1e9 / seconds);
  std::fflush(stdout);
  return seed;
}

}  // namespace tessera::train
