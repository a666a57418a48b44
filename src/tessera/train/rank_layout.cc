// Every rank's RankLayout from the flags and the mesh (rank_layout.h), step by step as the trainer
// builds the same things from its live objects.
#include "tessera/train/rank_layout.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "tessera/context/context_parallel.h"
#include "tessera/core/error.h"
#include "tessera/io/direct_file.h"
#include "tessera/offload/nvme_state_storage.h"
#include "tessera/offload/param_swap.h"
#include "tessera/pipeline/partition.h"
#include "tessera/train/deepspeed_config.h"
#include "tessera/train/offload_setup.h"
#include "tessera/train/sharding.h"

namespace tessera::train {

model::RecomputePolicy recompute_policy(const TrainArgs& a) {
  using P = model::RecomputePolicy;
  P p;
  if (a.recompute_granularity == "full") p.granularity = P::Granularity::kFull;
  if (a.recompute_granularity == "selective") p.granularity = P::Granularity::kSelective;
  p.method = a.recompute_method == "block" ? P::Method::kBlock : P::Method::kUniform;
  p.num_layers = std::max(1, a.recompute_num_layers);
  return p;
}

pipeline::ScheduleKind pipeline_schedule_kind(const TrainArgs& a) {
  if (!a.pipeline_schedule.empty()) return pipeline::parse_schedule_kind(a.pipeline_schedule);
  return a.num_layers_per_virtual_stage > 0 ? pipeline::ScheduleKind::kInterleaved
                                            : pipeline::ScheduleKind::kOneFOneB;
}

void validate_pipeline_schedule(const TrainArgs& a, pipeline::ScheduleKind kind,
                                const pipeline::ScheduleShape& shape, const BatchSchedule& batches,
                                int64_t data_parallel) {
  // Every global batch a ramp or step schedule will take must suit the schedule too.
  for (int64_t batch : batches.batches()) {
    pipeline::ScheduleShape s = shape;
    s.num_microbatches = static_cast<int>(batch / (a.micro_batch_size * data_parallel));
    pipeline::validate_schedule(kind, s);
  }
  pipeline::validate_schedule(kind, shape);
}

std::vector<context::CommType> cp_comm_types(const TrainArgs& a) {
  std::vector<context::CommType> types;
  for (const std::string& t : a.cp_comm_type)
    types.push_back(context::parse_comm_type(t, "--cp-comm-type"));
  return types;
}

DType compute_dtype_of(const TrainArgs& a) {
  return a.bf16 ? DType::kBF16 : a.fp16 ? DType::kF16 : DType::kF32;
}

void check_expert_tensor_parallel_size(const TrainArgs& a) {
  if (a.expert_tensor_parallel_size > 1 &&
      a.expert_tensor_parallel_size != a.tensor_model_parallel_size)
    throw Error("--expert-tensor-parallel-size " + std::to_string(a.expert_tensor_parallel_size) +
                ": only the tensor-parallel size (" + std::to_string(a.tensor_model_parallel_size) +
                ", experts split like the dense MLP) or 1 (experts whole) is implemented");
}

void set_reductions(RankLayout& r, const distributed::ShardingPlan& sharding, const TrainArgs& a) {
  r.zero_stage = static_cast<int>(sharding.stage);
  r.persistence_threshold = sharding.persistence_threshold;
  r.bucket_elements = sharding.bucket_elems;
  r.prefetch_elements = sharding.prefetch_elems;
  r.max_live_elements = sharding.max_live_elems;
  r.overlap_grad_reduce = sharding.overlap_grad_reduce;
  r.grad_reduce_dtype = sharding.grad_reduce_dtype;
  r.tp_reduce_in_16_bit = a.tp_reduce_in_16_bit;
}

comm::ParallelConfig parallel_config(const TrainArgs& a) {
  comm::ParallelConfig cfg;
  cfg.tensor = a.tensor_model_parallel_size;
  cfg.pipeline = a.pipeline_model_parallel_size;
  cfg.context = a.context_parallel_size;
  cfg.expert = a.expert_model_parallel_size;
  cfg.expert_tensor = a.expert_tensor_parallel_size;
  return cfg;
}

std::vector<RankLayout> rank_layouts(const TrainArgs& a, const comm::MeshLayout& mesh,
                                     int threads) {
  const int tp = mesh.tensor(), cp = mesh.context(), pp = mesh.pipeline();
  // Gradients reduce over data x context parallel (train_main.cc's groups.dp).
  const int dp = mesh.data() * cp, data = mesh.data();
  const bool experts_whole = mesh.expert_tensor() == 1 && tp > 1;
  const bool expert_grid = mesh.expert() > 1 || experts_whole;
  const distributed::ShardingPlan sharding = sharding_plan(a, dp);
  const pipeline::PartitionOptions partition{
      a.model.num_layers, pp,
      pipeline::virtual_stages_for(a.model.num_layers, pp, a.num_layers_per_virtual_stage),
      a.decoder_first_pipeline_num_layers, a.decoder_last_pipeline_num_layers};
  const std::vector<int> chunk_sizes = pipeline::partition_layers(partition);
  std::vector<context::CommType> cp_types;
  if (cp > 1) {
    const std::vector<context::CommType> given = cp_comm_types(a);
    for (int l = 0; l < a.model.num_layers; ++l)
      cp_types.push_back(given.size() == 1 ? given[0] : given.at(l));
  }
  const BatchSchedule batches = batch_schedule_of(a);
  const int64_t first_batch = batches.at(0);
  const pipeline::ScheduleKind schedule = pipeline_schedule_kind(a);
  validate_pipeline_schedule(
      a, schedule,
      {pp, static_cast<int>(first_batch / (a.micro_batch_size * data)), partition.virtual_stages},
      batches, data);
  const OffloadPlan offload = offload_plan(a, static_cast<int>(sharding.stage));
  // Optimizer state on NVMe: what is in memory of it is the buffers, sized as
  // offload::NvmeStateStorage sizes them from the rank's owned elements and the file system's
  // O_DIRECT alignment (of nvme_path where it exists already, else 4 KiB, ext4's and XFS's).
  // Parameters on NVMe likewise: the parts max_in_cpu keeps and the buffers, as
  // offload::ParamSwap sizes them.
  const auto alignment_of = [](const std::string& path) {
    std::error_code missing;
    if (!std::filesystem::exists(path, missing)) return int64_t{4096};
    return io::direct_io_alignment(path).strictest();
  };
  const int64_t optimizer_alignment =
      offload.optimizer_nvme ? alignment_of(offload.optimizer_path) : 0;
  const int64_t param_alignment = offload.param_nvme ? alignment_of(offload.param_path) : 0;

  std::vector<RankLayout> out;
  for (int rank = 0; rank < mesh.world_size(); ++rank) {
    const comm::MeshCoords at = mesh.coords(rank);
    RankLayout r;
    r.tp = tp;
    r.dp = dp;
    r.ep = mesh.expert();
    r.experts_whole = experts_whole;
    r.expert_tp = experts_whole ? 1 : tp;
    r.expert_dp = expert_grid ? mesh.expert_data() : 1;
    const model::ModelPart part = pipeline::part_of_rank(partition, chunk_sizes, at.pp);
    r.first_stage = part.embedding;
    r.last_stage = part.head;
    for (const auto& [first, end] : part.chunks) {
      r.chunk_layers.emplace_back();
      for (int l = first; l < end; ++l) {
        r.layers.push_back(l);
        r.chunk_layers.back().push_back(l);
      }
    }
    r.pp = pp;
    r.pp_rank = at.pp;
    r.schedule = schedule;
    r.micro_batches = first_batch / (a.micro_batch_size * data);
    r.tokens = a.micro_batch_size * a.model.seq_length / cp;
    r.micro_batch_size = a.micro_batch_size;
    r.sequence_parallel = a.sequence_parallel && tp > 1;
    r.cp = cp;
    r.cp_types = cp_types;
    if (cp > 1 && !a.hierarchical_cp_sizes.empty()) r.cp_a2a = a.hierarchical_cp_sizes[0];
    r.recompute = recompute_policy(a);
    set_reductions(r, sharding, a);
    r.compute = compute_dtype_of(a);
    r.sgd = a.optimizer == "sgd";
    r.threads = threads;
    if (offload.param_nvme) {
      const offload::ParamSwap::Sizes sizes = offload::ParamSwap::sizes_for(
          zero3_part_elements(a.model, r), offload.param,
          static_cast<int64_t>(dtype_size(r.compute)), param_alignment);
      r.param_offload_kept_elements = static_cast<double>(sizes.kept_elems);
      r.param_offload_buffer_bytes = static_cast<double>(sizes.buffer_bytes);
      r.param_offload_kept_parts = sizes.kept;
      r.param_offload_buffers = offload.param.buffer_count;
      r.param_offload_buffer_elements = offload.param.buffer_size;
    }
    if (offload.optimizer_nvme) {
      // The fp32 arrays of an owned element (optim::Optimizer): the master weights when they are
      // a copy (16-bit compute, or parameters on NVMe), and the moments (Adam) or the momentum
      // (SGD).
      const bool separate_master = r.compute != DType::kF32 || offload.param_nvme;
      const int arrays = (separate_master ? 1 : 0) + (r.sgd ? 1 : 2);
      const auto owned = static_cast<int64_t>(std::llround(optimizer_owned_elements(a.model, r)));
      r.optimizer_offload_buffer_bytes =
          static_cast<double>(offload::NvmeStateStorage::buffer_bytes_for(
              owned, arrays, offload.state, optimizer_alignment));
      r.optimizer_offload_arrays = arrays;
      r.optimizer_offload_sub_group = offload.state.sub_group_size;
      r.optimizer_offload_buffers = offload.state.buffer_count;
      r.optimizer_offload_pipeline_read = offload.state.pipeline_read;
      r.optimizer_offload_pipeline_write = offload.state.pipeline_write;
    }
    out.push_back(std::move(r));
  }
  return out;
}

bool drop_sequence_parallel_without_tp(TrainArgs& args) {
  if (!args.sequence_parallel || args.tensor_model_parallel_size != 1) return false;
  args.sequence_parallel = false;
  return true;
}

DeepSpeedApplied apply_batch_arguments(TrainArgs& args, int data_parallel) {
  DeepSpeedApplied applied;
  if (args.deepspeed) applied = apply_deepspeed_config(args, data_parallel);
  apply_step_batch_size_schedule(args);
  if (args.global_batch_size == 0) args.global_batch_size = args.micro_batch_size * data_parallel;
  validate_arguments(args, data_parallel);
  return applied;
}

comm::MeshLayout prepare_layout(TrainArgs& args, int world_size) {
  resolve_argument_files(args);
  drop_sequence_parallel_without_tp(args);
  check_expert_tensor_parallel_size(args);
  comm::MeshLayout mesh(world_size, parallel_config(args));
  if (mesh.expert() > 1) args.model.validate_expert_parallel(mesh.expert());
  apply_batch_arguments(args, mesh.data());
  return mesh;
}

}  // namespace tessera::train
