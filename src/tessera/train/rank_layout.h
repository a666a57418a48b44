// Every rank's place in a layout (memory_report.h's RankLayout) from the flags and the process
// mesh alone: no MPI, no model built, no memory allocated. This is what tessera-plan predicts
// from; the trainer derives the same fields from its live objects (trainer_memory.cc) and the
// plan's tests hold the two together through the measured runs.
//
// It follows the trainer's construction step by step (train/trainer_build.cc): the mesh's
// coordinates and group sizes (gradients reduce over DP x CP), the pipeline partition and schedule
// (pipeline/partition.h), the ShardingPlan (train/sharding.h), the recomputation policy, the first
// global batch's micro-batch count and the compute dtype.
#pragma once

#include <vector>

#include "tessera/comm/parallel_state.h"
#include "tessera/context/context_parallel.h"
#include "tessera/distributed/sharding_plan.h"
#include "tessera/model/chunk_runner.h"
#include "tessera/pipeline/schedule.h"
#include "tessera/train/arguments.h"
#include "tessera/train/deepspeed_config.h"
#include "tessera/train/memory_report.h"

namespace tessera::train {

// Megatron's recompute flags as a policy (validated by validate_arguments).
model::RecomputePolicy recompute_policy(const TrainArgs& args);

// --pipeline-schedule, else interleaved 1F1B when virtual stages are asked for, else 1F1B.
pipeline::ScheduleKind pipeline_schedule_kind(const TrainArgs& args);

// Checks that the schedule `kind` runs `shape` (its micro-batch count that of the first global
// batch) and every global batch of `batches` (a ramp or step schedule), with `data_parallel`
// ranks sharing each batch. tessera::Error naming the flags.
void validate_pipeline_schedule(const TrainArgs& args, pipeline::ScheduleKind kind,
                                const pipeline::ScheduleShape& shape, const BatchSchedule& batches,
                                int64_t data_parallel);

// --cp-comm-type as given: one type for every layer, or one per layer. tessera::Error naming the
// flag for an unknown name.
std::vector<context::CommType> cp_comm_types(const TrainArgs& args);

// Sets the fields of `r` that follow the run's ShardingPlan and its reduction flags: ZeRO's stage,
// persistence threshold, buckets, prefetch and live limits, overlap, the types gradients and TP
// activations are summed in. One place for rank_layouts and the trainer's memory report.
void set_reductions(RankLayout& r, const distributed::ShardingPlan& sharding,
                    const TrainArgs& args);

// The compute dtype of --bf16 / --fp16 (fp32 otherwise).
DType compute_dtype_of(const TrainArgs& args);

// --expert-tensor-parallel-size is the TP size or 1 (what is implemented); tessera::Error.
void check_expert_tensor_parallel_size(const TrainArgs& args);

// The mesh's parallel sizes from the flags (--tensor-model-parallel-size and the others).
comm::ParallelConfig parallel_config(const TrainArgs& args);

// Sequence parallelism splits over the TP group (as in Megatron), so at
// --tensor-model-parallel-size 1 it is turned off: true when it was on (tessera-train warns).
bool drop_sequence_parallel_without_tp(TrainArgs& args);

// The batch arguments on `data_parallel` ranks, in tessera-train's order: the DeepSpeed config
// applied (when --deepspeed), the step batch-size schedule, the global batch's default (micro
// batch x DP), then every check of validate_arguments. Returns what the DeepSpeed config set
// (empty without one). tessera::Error (one line) for what tessera-train would refuse.
DeepSpeedApplied apply_batch_arguments(TrainArgs& args, int data_parallel);

// tessera-train's steps from parsed flags to a validated layout on `world_size` ranks, without
// the runtime (train_main.cc's order): argument files resolved, sequence parallelism dropped at TP
// 1, the DeepSpeed config applied, batch defaults set, every check of validate_arguments.
// tessera::Error (one line) for what tessera-train would refuse.
comm::MeshLayout prepare_layout(TrainArgs& args, int world_size);

// RankLayout of every rank of `mesh` (index = world rank) for validated `args` (the parsing
// steps of tessera-train done: files resolved, DeepSpeed config applied, batch defaults set),
// with `threads` kernel threads a rank; the micro-batch count is the first global batch's (a
// ramp's later, larger batches are not planned). Checks what the trainer checks while it builds
// (the pipeline schedule's fit, the offload settings). Offloaded optimizer state or parameters
// are not modelled: tessera::Error naming the flag.
std::vector<RankLayout> rank_layouts(const TrainArgs& args, const comm::MeshLayout& mesh,
                                     int threads);

}  // namespace tessera::train
