// The process mesh (Megatron-Core's parallel_state), in two layers:
//  - MeshLayout: pure rank arithmetic, no MPI. From a world size and the parallel sizes it gives
//    every rank's coordinates and, for every GroupKind, the list of rank groups. Usable by tools
//    (tessera-mesh) and tests without starting any process.
//  - ParallelState: the ProcessGroups of one rank, built collectively from the world group and
//    a MeshLayout. An explicit object that is passed in, never a global (like Megatron-Core's
//    ProcessGroupCollection).
//
// Rank order is Megatron-Core's default "tp-cp-ep-dp-pp", leftmost fastest. The dense grid
// (attention, dense MLP, embeddings) has EP = 1 in it:
//     rank = tp + TP * (cp + CP * (dp + DP * pp)),          DP = world / (TP * CP * PP)
// and the expert grid (MoE expert weights) has CP = 1 in it:
//     rank = etp + ETP * (ep + EP * (edp + EDP * pp)),      EDP = world / (ETP * EP * PP)
// Both grids put PP outermost with the same stride (world / PP), so their pipeline groups are
// the same groups. Example, world 8, TP 2, PP 2 (DP 2):
//     tensor [0,1] [2,3] [4,5] [6,7]   data [0,2] [1,3] [4,6] [5,7]
//     pipeline [0,4] [1,5] [2,6] [3,7] model [0,1,4,5] [2,3,6,7]
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"

namespace tessera::comm {

// The parallel sizes, named after Megatron's flags. expert_tensor = 0 means "same as tensor"
// (Megatron's --expert-tensor-parallel-size default).
struct ParallelConfig {
  int tensor = 1;         // --tensor-model-parallel-size
  int context = 1;        // --context-parallel-size
  int expert = 1;         // --expert-model-parallel-size
  int pipeline = 1;       // --pipeline-model-parallel-size
  int expert_tensor = 0;  // --expert-tensor-parallel-size (0: = tensor)
};

// The groups of the mesh. Each kind's groups partition the world, except kEmbedding (see below).
// The "grid" column says which generator (dense or expert) the groups come from; the dims are
// those that vary inside one group. Names in parentheses are Megatron-Core's.
enum class GroupKind {
  kTensor,              // dense: tp           (tensor model parallel)
  kContext,             // dense: cp           (context parallel)
  kData,                // dense: dp           (data parallel)
  kDataContext,         // dense: cp, dp       (data parallel with CP: gradient reduction group)
  kPipeline,            // dense: pp           (pipeline model parallel)
  kModel,               // dense: tp, pp       (model parallel; Megatron's 'tp-pp', no CP)
  kTensorContext,       // dense: tp, cp       (tensor and context parallel)
  kEmbedding,           // first and last stage of each pipeline group; [rank] when PP = 1.
                        // Ranks of middle stages (PP > 2) belong to no embedding group.
  kExpertTensor,        // expert: etp         (expert tensor parallel)
  kExpert,              // expert: ep          (expert model parallel)
  kExpertTensorExpert,  // expert: etp, ep     (expert tensor and model parallel: MoE all-to-all)
  kExpertData,          // expert: edp         (expert data parallel: expert gradient reduction)
};
inline constexpr int kNumGroupKinds = 12;
inline constexpr std::array<GroupKind, kNumGroupKinds> kAllGroupKinds = {
    GroupKind::kTensor,
    GroupKind::kContext,
    GroupKind::kData,
    GroupKind::kDataContext,
    GroupKind::kPipeline,
    GroupKind::kModel,
    GroupKind::kTensorContext,
    GroupKind::kEmbedding,
    GroupKind::kExpertTensor,
    GroupKind::kExpert,
    GroupKind::kExpertTensorExpert,
    GroupKind::kExpertData};

// Short stable name, also the ProcessGroup name: "tp", "cp", "dp", "dp-cp", "pp", "mp", "tp-cp",
// "embd", "expt-tp", "ep", "expt-tp-ep", "expt-dp".
const char* group_kind_name(GroupKind kind);

// A rank's position in both grids.
struct MeshCoords {
  int tp = 0, cp = 0, dp = 0, pp = 0;        // dense grid
  int expert_tp = 0, ep = 0, expert_dp = 0;  // expert grid (pp is shared)
};

// Pure rank arithmetic of the mesh. Immutable and thread-safe after construction.
class MeshLayout {
 public:
  // Throws tessera::Error (one line naming the flags and numbers) when: world_size < 1, a size is
  // < 1 (expert_tensor < 0), world_size is not divisible by TP*CP*PP, EP does not divide DP*CP
  // (Megatron's rule, checked when ETP = TP), or world_size is not divisible by ETP*EP*PP.
  MeshLayout(int world_size, const ParallelConfig& config);

  int world_size() const { return world_; }
  int tensor() const { return tp_; }
  int context() const { return cp_; }
  int data() const { return dp_; }
  int pipeline() const { return pp_; }
  int expert() const { return ep_; }
  int expert_tensor() const { return etp_; }
  int expert_data() const { return edp_; }

  // Coordinates of `rank` in both grids. rank must be in [0, world_size) (checked).
  MeshCoords coords(int rank) const;
  // Inverse of the dense coordinates: tp + TP * (cp + CP * (dp + DP * pp)). Checked ranges.
  int dense_rank(int tp, int cp, int dp, int pp) const;

  // Every group of `kind`, each a list of ranks in increasing order, the groups ordered by their
  // first rank (the order Megatron-Core creates them in).
  const std::vector<std::vector<int>>& all_groups(GroupKind kind) const;
  // The group of `kind` containing `rank`; empty only for kEmbedding on a middle pipeline stage.
  const std::vector<int>& group_of(GroupKind kind, int rank) const;

  // "world 8 = TP 2 x CP 1 x DP 2 x PP 2; experts: ETP 2 x EP 1 x EDP 2 x PP 2"
  std::string summary() const;

 private:
  int world_, tp_, cp_, dp_, pp_, ep_, etp_, edp_;
  std::array<std::vector<std::vector<int>>, kNumGroupKinds> groups_;
  // index_[kind][rank] = position of rank's group in groups_[kind], -1 if none.
  std::array<std::vector<int>, kNumGroupKinds> index_;
};

// A human-readable table of every rank's coordinates followed by every group kind's groups, as
// printed by `tessera-mesh`. Deterministic; one line per rank and one line per group kind. With
// `hosts` (every rank's, comm/hosts.h) each rank's line names its host, and a line lists the
// hosts with their ranks.
std::string format_mesh(const MeshLayout& layout, const std::vector<std::string>& hosts = {});

// One rank's process groups for every GroupKind of a MeshLayout.
class ParallelState {
 public:
  // Collective over `world`: every member must call it with an equal layout, whose world_size()
  // must equal world->size() (else tessera::Error). Layout ranks are ranks of `world`. Creates
  // each kind's groups once, in kAllGroupKinds order, via ProcessGroup::new_subgroups.
  ParallelState(std::shared_ptr<ProcessGroup> world, const MeshLayout& layout);

  const MeshLayout& layout() const { return layout_; }
  const MeshCoords& coords() const { return coords_; }
  int rank() const { return rank_; }  // rank in `world`
  const std::shared_ptr<ProcessGroup>& world() const { return world_; }

  // This rank's group of `kind`. nullptr only for kEmbedding when in_embedding_group() is false.
  const std::shared_ptr<ProcessGroup>& group(GroupKind kind) const;
  bool in_embedding_group() const { return group(GroupKind::kEmbedding) != nullptr; }

 private:
  std::shared_ptr<ProcessGroup> world_;
  MeshLayout layout_;
  int rank_;
  MeshCoords coords_;
  std::array<std::shared_ptr<ProcessGroup>, kNumGroupKinds> groups_;
};

}  // namespace tessera::comm
