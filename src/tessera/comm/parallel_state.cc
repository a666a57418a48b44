#include "tessera/comm/parallel_state.h"

#include <cstdio>
#include <string>
#include <utility>

#include "tessera/comm/hosts.h"
#include "tessera/core/error.h"

namespace tessera::comm {
namespace {

// One axis of a rank grid: its size and whether it varies inside the groups being built.
struct Axis {
  int size;
  bool in_group;
};

// Groups of a grid whose axes are listed fastest first (rank = sum coord_i * stride_i with
// stride_i the product of the earlier sizes). A group fixes the axes with in_group = false and
// runs over all coordinates of the others. This is the algorithm of Megatron-Core's
// generate_masked_orthogonal_rank_groups (megatron/core/parallel_state.py, used by
// RankGenerator.get_ranks): group g takes the g-th combination of the fixed axes (fastest
// first), member m the m-th combination of the varying axes. Because strides grow along the
// axes, members come out increasing and groups come out ordered by their first rank.
std::vector<std::vector<int>> grid_groups(const std::vector<Axis>& axes) {
  std::vector<int> stride(axes.size());
  int world = 1, group_size = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    stride[i] = world;
    world *= axes[i].size;
    if (axes[i].in_group) group_size *= axes[i].size;
  }
  // base(g) and offset(m): decompose the index over the fixed / varying axes, fastest first.
  auto place = [&](int index, bool varying) {
    int rank = 0;
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i].in_group != varying) continue;
      rank += (index % axes[i].size) * stride[i];
      index /= axes[i].size;
    }
    return rank;
  };
  std::vector<std::vector<int>> groups(world / group_size);
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    const int base = place(g, /*varying=*/false);
    groups[g].reserve(group_size);
    for (int m = 0; m < group_size; ++m) groups[g].push_back(base + place(m, /*varying=*/true));
  }
  return groups;
}

int kind_index(GroupKind kind) { return static_cast<int>(kind); }

void require_positive(int value, const char* flag) {
  if (value < 1) {
    throw Error(std::string(flag) + " must be >= 1, got " + std::to_string(value));
  }
}

}  // namespace

const char* group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTensor:
      return "tp";
    case GroupKind::kContext:
      return "cp";
    case GroupKind::kData:
      return "dp";
    case GroupKind::kDataContext:
      return "dp-cp";
    case GroupKind::kPipeline:
      return "pp";
    case GroupKind::kModel:
      return "mp";
    case GroupKind::kTensorContext:
      return "tp-cp";
    case GroupKind::kEmbedding:
      return "embd";
    case GroupKind::kExpertTensor:
      return "expt-tp";
    case GroupKind::kExpert:
      return "ep";
    case GroupKind::kExpertTensorExpert:
      return "expt-tp-ep";
    case GroupKind::kExpertData:
      return "expt-dp";
  }
  check_failed("known GroupKind", __FILE__, __LINE__, std::to_string(kind_index(kind)));
}

MeshLayout::MeshLayout(int world_size, const ParallelConfig& config)
    : world_(world_size),
      tp_(config.tensor),
      cp_(config.context),
      pp_(config.pipeline),
      ep_(config.expert),
      etp_(config.expert_tensor == 0 ? config.tensor : config.expert_tensor) {
  if (world_size < 1) throw Error("world size must be >= 1, got " + std::to_string(world_size));
  require_positive(tp_, "--tensor-model-parallel-size");
  require_positive(cp_, "--context-parallel-size");
  require_positive(ep_, "--expert-model-parallel-size");
  require_positive(pp_, "--pipeline-model-parallel-size");
  if (config.expert_tensor < 0) {
    throw Error("--expert-tensor-parallel-size must be >= 1 (or 0 for the tensor size), got " +
                std::to_string(config.expert_tensor));
  }
  // int64 products: sizes come from flags and must not overflow into a false "divides".
  const int64_t model = int64_t{tp_} * cp_ * pp_;
  if (world_ % model != 0) {
    throw Error("world size " + std::to_string(world_) + " is not divisible by TP*CP*PP = " +
                std::to_string(model) + " (--tensor-model-parallel-size " + std::to_string(tp_) +
                " x --context-parallel-size " + std::to_string(cp_) +
                " x --pipeline-model-parallel-size " + std::to_string(pp_) + ")");
  }
  dp_ = static_cast<int>(world_ / model);
  // With ETP = TP the expert grid divides exactly when EP divides DP*CP; say it in those terms,
  // which is the rule Megatron users know.
  if (etp_ == tp_ && (int64_t{dp_} * cp_) % ep_ != 0) {
    throw Error("--expert-model-parallel-size " + std::to_string(ep_) +
                " does not divide DP*CP = " + std::to_string(int64_t{dp_} * cp_) + " (DP " +
                std::to_string(dp_) + " = world size " + std::to_string(world_) + " / (TP " +
                std::to_string(tp_) + " * CP " + std::to_string(cp_) + " * PP " +
                std::to_string(pp_) + "), CP " + std::to_string(cp_) + ")");
  }
  const int64_t expert_model = int64_t{etp_} * ep_ * pp_;
  if (world_ % expert_model != 0) {
    throw Error("world size " + std::to_string(world_) + " is not divisible by ETP*EP*PP = " +
                std::to_string(expert_model) + " (--expert-tensor-parallel-size " +
                std::to_string(etp_) + " x --expert-model-parallel-size " + std::to_string(ep_) +
                " x --pipeline-model-parallel-size " + std::to_string(pp_) + ")");
  }
  edp_ = static_cast<int>(world_ / expert_model);

  auto dense = [&](bool tp, bool cp, bool dp, bool pp) {
    return grid_groups({{tp_, tp}, {cp_, cp}, {dp_, dp}, {pp_, pp}});
  };
  auto expert = [&](bool etp, bool ep, bool edp) {
    return grid_groups({{etp_, etp}, {ep_, ep}, {edp_, edp}, {pp_, false}});
  };
  auto& g = groups_;
  g[kind_index(GroupKind::kTensor)] = dense(true, false, false, false);
  g[kind_index(GroupKind::kContext)] = dense(false, true, false, false);
  g[kind_index(GroupKind::kData)] = dense(false, false, true, false);
  g[kind_index(GroupKind::kDataContext)] = dense(false, true, true, false);
  g[kind_index(GroupKind::kPipeline)] = dense(false, false, false, true);
  g[kind_index(GroupKind::kModel)] = dense(true, false, false, true);
  g[kind_index(GroupKind::kTensorContext)] = dense(true, true, false, false);
  g[kind_index(GroupKind::kExpertTensor)] = expert(true, false, false);
  g[kind_index(GroupKind::kExpert)] = expert(false, true, false);
  g[kind_index(GroupKind::kExpertTensorExpert)] = expert(true, true, false);
  g[kind_index(GroupKind::kExpertData)] = expert(false, false, true);
  // Megatron's default_embedding_ranks: first and last rank of each pipeline group.
  for (const auto& pipeline : g[kind_index(GroupKind::kPipeline)]) {
    if (pipeline.size() == 1) {
      g[kind_index(GroupKind::kEmbedding)].push_back({pipeline.front()});
    } else {
      g[kind_index(GroupKind::kEmbedding)].push_back({pipeline.front(), pipeline.back()});
    }
  }
  // Megatron asserts this too: expert layers pipeline with the dense layers they sit among.
  // Both grids put PP outermost with stride world / PP, so it holds by construction.
  TESSERA_CHECK(grid_groups({{etp_, false}, {ep_, false}, {edp_, false}, {pp_, true}}) ==
                g[kind_index(GroupKind::kPipeline)]);

  for (int k = 0; k < kNumGroupKinds; ++k) {
    index_[k].assign(world_, -1);
    for (int i = 0; i < static_cast<int>(g[k].size()); ++i) {
      for (int r : g[k][i]) {
        TESSERA_CHECK_MSG(index_[k][r] == -1, "rank in two groups of one kind");
        index_[k][r] = i;
      }
    }
  }
}

MeshCoords MeshLayout::coords(int rank) const {
  TESSERA_CHECK_MSG(rank >= 0 && rank < world_, "rank " + std::to_string(rank));
  MeshCoords c;
  c.tp = rank % tp_;
  c.cp = rank / tp_ % cp_;
  c.dp = rank / (tp_ * cp_) % dp_;
  c.pp = rank / (tp_ * cp_ * dp_);
  c.expert_tp = rank % etp_;
  c.ep = rank / etp_ % ep_;
  c.expert_dp = rank / (etp_ * ep_) % edp_;
  return c;
}

int MeshLayout::dense_rank(int tp, int cp, int dp, int pp) const {
  TESSERA_CHECK(tp >= 0 && tp < tp_ && cp >= 0 && cp < cp_ && dp >= 0 && dp < dp_ && pp >= 0 &&
                pp < pp_);
  return tp + tp_ * (cp + cp_ * (dp + dp_ * pp));
}

const std::vector<std::vector<int>>& MeshLayout::all_groups(GroupKind kind) const {
  return groups_[kind_index(kind)];
}

const std::vector<int>& MeshLayout::group_of(GroupKind kind, int rank) const {
  TESSERA_CHECK_MSG(rank >= 0 && rank < world_, "rank " + std::to_string(rank));
  static const std::vector<int> kNone;
  const int i = index_[kind_index(kind)][rank];
  return i < 0 ? kNone : groups_[kind_index(kind)][i];
}

std::string MeshLayout::summary() const {
  return "world " + std::to_string(world_) + " = TP " + std::to_string(tp_) + " x CP " +
         std::to_string(cp_) + " x DP " + std::to_string(dp_) + " x PP " + std::to_string(pp_) +
         "; experts: ETP " + std::to_string(etp_) + " x EP " + std::to_string(ep_) + " x EDP " +
         std::to_string(edp_) + " x PP " + std::to_string(pp_);
}

std::string format_mesh(const MeshLayout& layout, const std::vector<std::string>& hosts) {
  std::string out = layout.summary() + " (rank order tp-cp-ep-dp-pp, TP fastest)\n";
  if (!hosts.empty()) out += format_hosts(hosts) + "\n";
  out += "\n";
  char line[160];
  std::snprintf(line, sizeof line, "%6s %4s %4s %4s %4s %4s %4s %4s%s\n", "rank", "tp", "cp", "dp",
                "pp", "etp", "ep", "edp", hosts.empty() ? "" : "  host");
  out += line;
  for (int r = 0; r < layout.world_size(); ++r) {
    const MeshCoords c = layout.coords(r);
    std::snprintf(line, sizeof line, "%6d %4d %4d %4d %4d %4d %4d %4d", r, c.tp, c.cp, c.dp, c.pp,
                  c.expert_tp, c.ep, c.expert_dp);
    out += line;
    if (!hosts.empty()) out += "  " + hosts.at(r);
    out += "\n";
  }
  out += "\n";
  for (GroupKind kind : kAllGroupKinds) {
    std::snprintf(line, sizeof line, "%-11s", group_kind_name(kind));
    out += line;
    for (const auto& group : layout.all_groups(kind)) {
      out += " [";
      for (size_t i = 0; i < group.size(); ++i) {
        if (i > 0) out += ",";
        out += std::to_string(group[i]);
      }
      out += "]";
    }
    out += "\n";
  }
  return out;
}

ParallelState::ParallelState(std::shared_ptr<ProcessGroup> world, const MeshLayout& layout)
    : world_(std::move(world)), layout_(layout) {
  TESSERA_CHECK(world_ != nullptr);
  if (layout_.world_size() != world_->size()) {
    throw Error("the mesh (" + layout_.summary() + ") needs " +
                std::to_string(layout_.world_size()) + " ranks but the job has " +
                std::to_string(world_->size()));
  }
  rank_ = world_->rank();
  coords_ = layout_.coords(rank_);
  // One new_subgroups call per kind, in the same order on every rank (they are collectives).
  for (GroupKind kind : kAllGroupKinds) {
    std::vector<std::vector<int>> partition = layout_.all_groups(kind);
    if (kind == GroupKind::kEmbedding) {
      // new_subgroups needs a partition of the whole group: middle pipeline stages get a
      // group of their own, which they then drop (Megatron leaves them without one too).
      for (int r = 0; r < layout_.world_size(); ++r) {
        if (layout_.group_of(kind, r).empty()) partition.push_back({r});
      }
    }
    auto group = world_->new_subgroups(partition, group_kind_name(kind));
    if (kind == GroupKind::kEmbedding && layout_.group_of(kind, rank_).empty()) group = nullptr;
    groups_[kind_index(kind)] = std::move(group);
  }
}

const std::shared_ptr<ProcessGroup>& ParallelState::group(GroupKind kind) const {
  return groups_[kind_index(kind)];
}

}  // namespace tessera::comm
