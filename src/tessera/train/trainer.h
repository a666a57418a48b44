// The training loop. One iteration: the global batch is split into micro-batches whose
// gradients accumulate in fp32 and are reduced over data parallelism (the pipeline schedule);
// then one DistributedOptimizer::step() (gradient completion, overflow policy, global norm,
// clipping, the update, parameter gathers); then metrics are logged. Evaluation runs every
// --eval-interval iterations on the validation samples.
//
// The reported `lm loss` of iteration i is the mean over all counted tokens of the global batch
// from that iteration's own forward passes (before its update).
//
// Tensor parallel: every rank of the TP group runs the same micro-batches on its shards; the
// gradients are completed across the group before the norm (distributed::TensorParallelGrads), so
// the run follows the single-process run. Pipeline parallel: each rank holds its stage's layers
// and runs the schedule (pipeline/executor.h); a tied word embedding's gradient is summed over
// the embedding group, and losses and norms over the pipeline. Rank 0 of the world (the first
// stage) prints, writes the metrics file and the export.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "tessera/data/indexed_dataset.h"
#include "tessera/data/micro_batch.h"
#include "tessera/data/sampler.h"
#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/distributed/distributed_optimizer.h"
#include "tessera/distributed/sharding_plan.h"
#include "tessera/distributed/tensor_parallel_grads.h"
#include "tessera/distributed/zero3_params.h"
#include "tessera/model/chunk_runner.h"
#include "tessera/model/gpt_model.h"
#include "tessera/numerics/numerics_dump.h"
#include "tessera/optim/loss_scaler.h"
#include "tessera/optim/lr_schedule.h"
#include "tessera/optim/optimizer.h"
#include "tessera/parallel/tensor_parallel.h"
#include "tessera/pipeline/executor.h"
#include "tessera/pipeline/partition.h"
#include "tessera/pipeline/timeline.h"
#include "tessera/train/arguments.h"
#include "tessera/train/batch_schedule.h"
#include "tessera/train/metrics.h"
#include "tessera/train/offload_setup.h"
#include "tessera/train/straggler_report.h"
#include "tessera/train/tensorboard_log.h"

namespace tessera::train {

// The process groups a Trainer runs over. Default: one process.
struct TrainerGroups {
  parallel::TensorParallel tp;
  // The gradient group: data x context parallel (Megatron's dp_cp; the data-parallel group when
  // CP is 1); nullptr: one rank. Samples are assigned over its data-parallel part.
  std::shared_ptr<comm::ProcessGroup> dp;
  // Context parallel (CP > 1 only; nullptr otherwise): the context-parallel group and each
  // layer's communication type (--cp-comm-type).
  std::shared_ptr<comm::ProcessGroup> cp;
  std::shared_ptr<comm::ProcessGroup> pp;         // pipeline group; nullptr: PP 1
  std::shared_ptr<comm::ProcessGroup> embedding;  // first and last stage; nullptr: not in one
  std::shared_ptr<comm::ProcessGroup> model;      // tensor x pipeline; nullptr: one rank
  std::shared_ptr<comm::ProcessGroup> world;      // every rank; nullptr: one process
  // Expert parallelism (EP > 1, or expert TP 1 under TP > 1; nullptr otherwise): the
  // expert-parallel group (MoE token exchange; nullptr at EP 1), the expert-data-parallel group
  // (expert gradient reduction) and the expert model group (expert TP x EP: the gradient norm).
  std::shared_ptr<comm::ProcessGroup> ep, edp, expert_model;
  // --expert-tensor-parallel-size 1 under TP > 1: experts whole, folded over the TP ranks.
  bool experts_whole = false;
  // The pipeline stage of every world rank (comm::MeshLayout::coords(r).pp), labelling the
  // timeline's rows; empty: stage 0 for all (PP 1).
  std::vector<int> pp_rank_of;
};

class Trainer {
 public:
  // Builds model, optimizer, schedule and data from validated arguments, the model split over
  // `tp` (default: one process). Throws tessera::Error on bad input (missing data file, token
  // out of vocabulary, ...). With TP > 1, collective over the TP group.
  explicit Trainer(const TrainArgs& args, const TrainerGroups& groups = {});
  ~Trainer();

  // Runs to --train-iters (or --exit-interval / --exit-duration-in-mins), then exports weights
  // if asked. Returns the last iteration run.
  int64_t train();

  // Makes train() continue a run after `iteration` iterations that consumed `consumed_samples`
  // training samples: the data continues with sample consumed_samples, exactly where the
  // uninterrupted run would be, and validation passes continue after those already run (the
  // checkpoint loader's entry point; weights, optimizer and schedule state are its own
  // business). Call before train().
  void resume_at(int64_t iteration, int64_t consumed_samples);

  model::GPTModel& model() { return *model_; }
  optim::Optimizer& optimizer() { return optimizer_->optimizer(); }

 private:
  struct StepOutcome {
    double loss_sum = 0, tokens = 0, grad_norm = 0;
    std::optional<double> num_zeros, params_norm;  // --log-num-zeros-in-grad, --log-params-norm
    bool skipped = false, nan = false;
    MoeStepReport moe;
  };
  StepOutcome train_step(int64_t iteration);
  // The background loader of this run's training micro-batches (prefetcher_).
  void start_prefetcher();
  // After the last iteration run (`iteration` is one past it when the run reached its end):
  // the test pass, the final save, the export.
  void finish_run(int64_t iteration);

  // Construction (trainer_build.cc), in this order; each step uses what the earlier ones made.
  struct PipelinePlan {
    pipeline::ScheduleKind kind = pipeline::ScheduleKind::kOneFOneB;
    pipeline::ScheduleShape shape;
  };
  void check_output_paths() const;
  // Collective: --save is one directory for every rank (shared between hosts), else
  // tessera::Error naming a rank and host that does not see it.
  void check_save_shared() const;
  // Sets partition_ and chunk_layers_; returns this rank's schedule (validated).
  PipelinePlan plan_pipeline();
  // The model part of this rank (after plan_pipeline), initialised only where `sharding` keeps
  // it.
  std::unique_ptr<model::GPTModel> build_model(const distributed::ShardingPlan& sharding) const;
  // The runner of model_ with the run's recomputation policy (ZeRO 3 access is attached by
  // build_gradient_sharding, the DP grads-ready hook per micro-batch by train_step).
  std::unique_ptr<model::ChunkRunner> build_runner() const;
  // tp_grads_, dp_grads_ and (ZeRO 3) zero3_, attached to runner_.
  void build_gradient_sharding(const distributed::ShardingPlan& sharding);
  std::unique_ptr<distributed::DistributedOptimizer> build_optimizer(
      const distributed::ShardingPlan& sharding);
  void print_setup(const distributed::ShardingPlan& sharding) const;
  // "> offload: ..." for the optimizer state on NVMe: where, how big, how it moves.
  void print_optimizer_offload(const offload::NvmeStateStorage& state) const;
  // The tied embedding's flat range when sync_tied_embedding() sums it between the pipeline's
  // first and last stage (after the data-parallel reduction), else none.
  std::vector<distributed::FlatRange> synced_tied_embedding() const;
  // "> offload: ..." for the parameters on NVMe (ZeRO 3).
  void print_param_offload(const offload::ParamSwap& swap) const;
  // The memory report after the first iteration (trainer_memory.cc). Collective.
  void report_memory();
  DType compute_dtype() const;
  // The loss over eval_iters global batches of the validation split (the next ones each pass),
  // or with `test` of the test split's first ones; NaN when there are none. Printed.
  double evaluate(int64_t iteration, bool test = false);
  void build_data();
  // A loaded micro-batch bound to the model: it takes the arrays, the Batch and the step
  // context (positions, document starts) view them.
  // Samples [first, first + micro_batch_size) of `sampler` with their masks, this rank's chunks
  // of each under context parallelism.
  void load_samples(const data::TokenSampler& sampler, int64_t first, data::MicroBatch& out) const;
  std::unique_ptr<pipeline::MicroBatch> bind_micro_batch(data::MicroBatch data, int64_t iteration,
                                                         bool training) const;
  // Sums the tied word embedding's gradient over the embedding group (pipelines only).
  void sync_tied_embedding();
  void export_weights() const;
  // Checkpoints (trainer_checkpoint.cc). save_checkpoint snapshots this rank's slices and writes
  // them (on a background thread with --async-save); finish_pending_save publishes a finished
  // save (collective: every rank calls it at the same points; without `wait` it returns at once
  // while any rank is still writing). load_checkpoint restores --load into this layout.
  void save_checkpoint(int64_t iteration);
  void finish_pending_save(bool wait);
  // Returns the seed the run continues with: the checkpoint's when it resumes a run (unless
  // --no-load-rng or --finetune), else --seed.
  uint64_t load_checkpoint();
  void load_hf_weights();      // --load names a Hugging Face directory: weights only
  void after_master_loaded();  // compute values from the loaded master weights, on every rank
  nlohmann::json run_state(int64_t iteration) const;
  void print_expert_memory(const distributed::ShardingPlan& sharding) const;
  // The wall-clock breakdown (--timing-log-level >= 1): this rank's time per phase, averaged
  // over the last `iterations`; resets the timers.
  void print_breakdown(int64_t iterations);

  // Sums loss/token scalars over DP and the pipeline (they live on the last stage); identical
  // on every rank.
  std::vector<double> sum_losses(const std::vector<double>& v) const;

  const TrainArgs args_;  // as given; never rewritten (the restored seed is seed_)
  uint64_t seed_ = 0;     // data order and dropout masks: --seed, or the resumed run's
  parallel::TensorParallel tp_;
  // dp_ is the gradient group (data x context parallel); samples are split over its data part
  // (data_size_ ranks, this one data_rank_), each CP rank of a data rank taking its chunks.
  std::shared_ptr<comm::ProcessGroup> dp_, cp_, pp_, embedding_, model_group_, world_, ep_, edp_,
      expert_model_;
  int dp_size_ = 1, dp_rank_ = 0;
  int cp_size_ = 1, cp_rank_ = 0, data_size_ = 1, data_rank_ = 0;
  int pp_size_ = 1, pp_rank_ = 0, world_size_ = 1;
  int ep_size_ = 1, ep_rank_ = 0, edp_size_ = 1, edp_rank_ = 0;
  bool experts_whole_ = false;   // TrainerGroups::experts_whole
  std::vector<int> pp_rank_of_;  // TrainerGroups::pp_rank_of
  bool reporting_rank_ = true;   // prints, writes metrics and exports
  int64_t train_iters_ = 0;
  // The global batch of each iteration (Megatron's rampup and step schedules; else constant).
  BatchSchedule batches_;
  int64_t current_batch_ = 0;  // this iteration's global batch (train_step)
  // The learning-rate schedule counts samples (Megatron's sample-based flags, or a changing
  // global batch), not updates.
  bool samples_schedule_ = false;
  int64_t start_iteration_ = 0;  // iterations done before train() (resume_at)
  int64_t consumed_samples_ = 0;
  int64_t evaluations_ = 0;  // validation passes so far: each takes the next samples
  // Swap I/O and directories of offloaded state (none without offload); declared before the
  // optimizer and ZeRO 3, whose swap files live in them, so destroyed after them.
  std::unique_ptr<OffloadRuntime> offload_;
  offload::SwapIo::Counters io_last_;  // the counters at the end of the previous iteration
  offload::NvmeStateStorage* optimizer_nvme_ = nullptr;  // the optimizer's, when on NVMe
  std::unique_ptr<model::GPTModel> model_;
  std::unique_ptr<distributed::TensorParallelGrads> tp_grads_;
  std::unique_ptr<distributed::DataParallelGrads> dp_grads_;
  // ZeRO 3's parameters on NVMe (parameter offload only), used by zero3_: declared before it.
  std::unique_ptr<offload::ParamSwap> param_swap_;
  std::unique_ptr<distributed::Zero3Params> zero3_;  // ZeRO stage 3 only
  // The owned gradients' way to the optimizer's swap (optimizer state on NVMe only): fed by
  // dp_grads_, read by optimizer_'s step.
  std::unique_ptr<distributed::GradientOffload> grad_offload_;
  // Runs model_ with this run's policies: recomputation, ZeRO 3 access (zero3_), the DP
  // grads-ready hook (dp_grads_); declared after them, so destroyed first.
  std::unique_ptr<model::ChunkRunner> runner_;
  std::unique_ptr<numerics::NumericsDump> numerics_;  // --dump-numerics (runner_'s probe)
  pipeline::PartitionOptions partition_;
  std::vector<int> chunk_layers_;  // layers per model chunk (pipeline/partition.h)
  std::unique_ptr<pipeline::PipelineExecutor> executor_;
  pipeline::Timeline timeline_;
  pipeline::PhaseWindow breakdown_window_;  // print_breakdown()'s
  // Owns the optimizer, the learning-rate schedule and the loss scaler; uses the gradient
  // reducers and ZeRO 3's parameters above (declared after them, so destroyed first).
  std::unique_ptr<distributed::DistributedOptimizer> optimizer_;
  std::unique_ptr<data::TokenSampler> train_data_, valid_data_, test_data_;
  data::LtorOptions ltor_;
  std::unique_ptr<data::Prefetcher> prefetcher_;  // training micro-batches, during train()
  MetricsWriter metrics_;
  TensorBoardLog tensorboard_;  // the last rank writes, as Megatron's
  StragglerReport stragglers_;  // --log-straggler
  struct PendingSave {
    int64_t iteration = 0;
    nlohmann::json state;
    int64_t bytes = 0;  // this rank's
    // The most state the save had in memory at once: a snapshot's copies, or (streamed, with the
    // state on NVMe) the bytes it wrote from the largest window the optimizer's visit held.
    int64_t held_bytes = 0;
    bool streamed = false;
    std::chrono::steady_clock::time_point start;
    double snapshot_s = 0;
    std::future<void> writer;  // --async-save only
  };
  std::unique_ptr<PendingSave> pending_save_;
  int64_t last_saved_iteration_ = -1;
  double unigram_entropy_ = 0;  // of the training tokens (data files only), for reference
};

// Runs tessera-train's main: parses, validates, trains. Returns the process exit code.
int train_main(int argc, const char* const* argv);

}  // namespace tessera::train
