// MeshLayout: pure rank arithmetic of the process mesh (no MPI). Checked against Megatron's
// published example table and against an independent brute force that walks every
// coordinate tuple of the formula and groups ranks by the coordinates a group keeps fixed.
#include "tessera/comm/parallel_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::comm {
namespace {

using Groups = std::vector<std::vector<int>>;

// --- brute force ------------------------------------------------------------------------------
// Every rank's coordinates straight from the two formulas, by nested loops over coordinates
// (not by dividing ranks, which is what the library does).
struct Brute {
  int world, tp, cp, dp, pp, etp, ep, edp;
  std::vector<MeshCoords> at;  // at[rank]

  Brute(int world_size, int t, int c, int p, int e, int et)
      : world(world_size),
        tp(t),
        cp(c),
        dp(world_size / (t * c * p)),
        pp(p),
        etp(et),
        ep(e),
        edp(world_size / (et * e * p)),
        at(world_size) {
    std::vector<int> seen(world, 0);
    for (int ip = 0; ip < pp; ++ip)
      for (int id = 0; id < dp; ++id)
        for (int ic = 0; ic < cp; ++ic)
          for (int it = 0; it < tp; ++it) {
            const int r = it + tp * (ic + cp * (id + dp * ip));
            at[r].tp = it, at[r].cp = ic, at[r].dp = id, at[r].pp = ip;
            ++seen[r];
          }
    for (int ip = 0; ip < pp; ++ip)
      for (int id = 0; id < edp; ++id)
        for (int ie = 0; ie < ep; ++ie)
          for (int it = 0; it < etp; ++it) {
            const int r = it + etp * (ie + ep * (id + edp * ip));
            EXPECT_EQ(at[r].pp, ip) << "expert grid disagrees with dense grid on pp of " << r;
            at[r].expert_tp = it, at[r].ep = ie, at[r].expert_dp = id;
            ++seen[r];
          }
    for (int r = 0; r < world; ++r) EXPECT_EQ(seen[r], 2) << "rank " << r;
  }

  // Ranks with equal key fall in one group; members ascending, groups by first member.
  template <typename KeyFn>
  Groups group_by(KeyFn key) const {
    std::map<decltype(key(at[0])), std::vector<int>> by_key;
    for (int r = 0; r < world; ++r) by_key[key(at[r])].push_back(r);
    Groups out;
    for (auto& [k, members] : by_key) out.push_back(members);
    std::sort(out.begin(), out.end());
    return out;
  }

  // The key is what stays fixed inside a group: the coordinates not in the group.
  Groups groups(GroupKind kind) const {
    using std::make_tuple;
    switch (kind) {
      case GroupKind::kTensor:
        return group_by([](const MeshCoords& c) { return make_tuple(c.cp, c.dp, c.pp); });
      case GroupKind::kContext:
        return group_by([](const MeshCoords& c) { return make_tuple(c.tp, c.dp, c.pp); });
      case GroupKind::kData:
        return group_by([](const MeshCoords& c) { return make_tuple(c.tp, c.cp, c.pp); });
      case GroupKind::kDataContext:
        return group_by([](const MeshCoords& c) { return make_tuple(c.tp, c.pp); });
      case GroupKind::kPipeline:
        return group_by([](const MeshCoords& c) { return make_tuple(c.tp, c.cp, c.dp); });
      case GroupKind::kModel:
        return group_by([](const MeshCoords& c) { return make_tuple(c.cp, c.dp); });
      case GroupKind::kTensorContext:
        return group_by([](const MeshCoords& c) { return make_tuple(c.dp, c.pp); });
      case GroupKind::kEmbedding: {
        // Ranks on stage 0 or stage PP-1, grouped by everything but pp.
        Groups all = group_by([](const MeshCoords& c) { return make_tuple(c.tp, c.cp, c.dp); });
        Groups out;
        for (auto& g : all) {
          std::vector<int> e;
          for (int r : g)
            if (at[r].pp == 0 || at[r].pp == pp - 1) e.push_back(r);
          out.push_back(e);
        }
        return out;
      }
      case GroupKind::kExpertTensor:
        return group_by([](const MeshCoords& c) { return make_tuple(c.ep, c.expert_dp, c.pp); });
      case GroupKind::kExpert:
        return group_by(
            [](const MeshCoords& c) { return make_tuple(c.expert_tp, c.expert_dp, c.pp); });
      case GroupKind::kExpertTensorExpert:
        return group_by([](const MeshCoords& c) { return make_tuple(c.expert_dp, c.pp); });
      case GroupKind::kExpertData:
        return group_by([](const MeshCoords& c) { return make_tuple(c.expert_tp, c.ep, c.pp); });
    }
    return {};
  }
};

void expect_coords_eq(const MeshCoords& a, const MeshCoords& b, int rank) {
  EXPECT_EQ(a.tp, b.tp) << "rank " << rank;
  EXPECT_EQ(a.cp, b.cp) << "rank " << rank;
  EXPECT_EQ(a.dp, b.dp) << "rank " << rank;
  EXPECT_EQ(a.pp, b.pp) << "rank " << rank;
  EXPECT_EQ(a.expert_tp, b.expert_tp) << "rank " << rank;
  EXPECT_EQ(a.ep, b.ep) << "rank " << rank;
  EXPECT_EQ(a.expert_dp, b.expert_dp) << "rank " << rank;
}

// Every rank in exactly one group of the kind.
void expect_partition(const Groups& groups, int world, const char* what) {
  std::vector<int> count(world, 0);
  for (const auto& g : groups)
    for (int r : g) {
      ASSERT_TRUE(r >= 0 && r < world) << what;
      ++count[r];
    }
  for (int r = 0; r < world; ++r) EXPECT_EQ(count[r], 1) << what << ": rank " << r;
}

// --- Megatron's example ------------------------------------------------------------------------

TEST(MeshLayoutTest, MegatronWorld8Tp2Pp2Table) {
  ParallelConfig cfg;
  cfg.tensor = 2;
  cfg.pipeline = 2;
  const MeshLayout m(8, cfg);
  EXPECT_EQ(m.data(), 2);
  EXPECT_EQ(m.all_groups(GroupKind::kTensor), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.all_groups(GroupKind::kData), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.all_groups(GroupKind::kPipeline), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.all_groups(GroupKind::kModel), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  // CP = 1: the gradient-reduction group is the DP group; context groups are single ranks.
  EXPECT_EQ(m.all_groups(GroupKind::kDataContext), m.all_groups(GroupKind::kData));
  EXPECT_EQ(m.all_groups(GroupKind::kContext), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  // PP = 2: each embedding group is the whole pipeline group.
  EXPECT_EQ(m.all_groups(GroupKind::kEmbedding), m.all_groups(GroupKind::kPipeline));
  // EP = 1, ETP = TP: expert-TP = TP and expert-DP = DP.
  EXPECT_EQ(m.all_groups(GroupKind::kExpertTensor), m.all_groups(GroupKind::kTensor));
  EXPECT_EQ(m.all_groups(GroupKind::kExpertData), m.all_groups(GroupKind::kData));
  EXPECT_EQ(m.group_of(GroupKind::kData, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(m.group_of(GroupKind::kModel, 6), (std::vector<int>{2, 3, 6, 7}));
  const MeshCoords c = m.coords(6);  // 6 = tp 0 + 2 * (dp 1 + 2 * pp 1)
  EXPECT_EQ(c.tp, 0);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(m.dense_rank(1, 0, 1, 1), 7);
}

// Megatron's initialize_model_parallel docstring: 16 GPUs, TP 2, PP 4.
TEST(MeshLayoutTest, MegatronWorld16Tp2Pp4Docstring) {
  ParallelConfig cfg;
  cfg.tensor = 2;
  cfg.pipeline = 4;
  const MeshLayout m(16, cfg);
  EXPECT_EQ(m.all_groups(GroupKind::kData),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(m.all_groups(GroupKind::kPipeline),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  // PP = 4: embedding = stages 0 and 3; ranks of stages 1 and 2 are in no embedding group.
  EXPECT_EQ(m.all_groups(GroupKind::kEmbedding), (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_TRUE(m.group_of(GroupKind::kEmbedding, 5).empty());
  EXPECT_EQ(m.group_of(GroupKind::kEmbedding, 14), (std::vector<int>{2, 14}));
}

// Megatron's context_parallel_size docstring: 8 GPUs, TP 4, CP 2 -> CP groups [0,4] [1,5] ...
TEST(MeshLayoutTest, MegatronWorld8Tp4Cp2Docstring) {
  ParallelConfig cfg;
  cfg.tensor = 4;
  cfg.context = 2;
  const MeshLayout m(8, cfg);
  EXPECT_EQ(m.all_groups(GroupKind::kContext), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.all_groups(GroupKind::kTensorContext), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  // DP = 1: data groups are single ranks, the gradient-reduction group is CP.
  EXPECT_EQ(m.all_groups(GroupKind::kDataContext), m.all_groups(GroupKind::kContext));
  // Megatron's model-parallel group is 'tp-pp': CP is not in it.
  EXPECT_EQ(m.all_groups(GroupKind::kModel), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(MeshLayoutTest, SingleRank) {
  const MeshLayout m(1, ParallelConfig{});
  for (GroupKind k : kAllGroupKinds)
    EXPECT_EQ(m.all_groups(k), (Groups{{0}})) << group_kind_name(k);
}

// --- brute force over many layouts -------------------------------------------------------------

struct Case {
  int world, tp, cp, ep, pp, etp;  // etp: the resolved expert-TP size
};

TEST(MeshLayoutTest, MatchesBruteForceAndPartitionsWorld) {
  const std::vector<Case> cases = {
      {8, 2, 1, 1, 2, 2},  {8, 1, 2, 2, 2, 1},  {8, 2, 2, 2, 1, 2},  {16, 2, 2, 2, 2, 2},
      {24, 2, 3, 3, 2, 2}, {12, 1, 3, 1, 2, 1}, {16, 2, 1, 4, 2, 1}, {16, 4, 1, 2, 1, 2},
      {32, 2, 2, 4, 2, 2}, {6, 3, 1, 1, 1, 3},  {16, 1, 1, 8, 2, 1}, {30, 1, 5, 5, 3, 1},
      {8, 2, 1, 4, 1, 1},  // ETP 1 != TP 2: an expert group spans ranks of two TP groups
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(testing::Message() << "world " << k.world << " tp " << k.tp << " cp " << k.cp
                                    << " ep " << k.ep << " pp " << k.pp << " etp " << k.etp);
    ParallelConfig cfg;
    cfg.tensor = k.tp;
    cfg.context = k.cp;
    cfg.expert = k.ep;
    cfg.pipeline = k.pp;
    cfg.expert_tensor = k.etp == k.tp ? 0 : k.etp;
    const MeshLayout m(k.world, cfg);
    const Brute b(k.world, k.tp, k.cp, k.pp, k.ep, k.etp);
    EXPECT_EQ(m.data(), b.dp);
    EXPECT_EQ(m.expert_data(), b.edp);
    EXPECT_EQ(m.expert_tensor(), k.etp);
    for (int r = 0; r < k.world; ++r) {
      expect_coords_eq(m.coords(r), b.at[r], r);
      const MeshCoords c = b.at[r];
      EXPECT_EQ(m.dense_rank(c.tp, c.cp, c.dp, c.pp), r);
    }
    for (GroupKind kind : kAllGroupKinds) {
      SCOPED_TRACE(group_kind_name(kind));
      const Groups& groups = m.all_groups(kind);
      EXPECT_EQ(groups, b.groups(kind));
      if (kind == GroupKind::kEmbedding) {
        // Covers exactly stages 0 and PP-1, each rank at most once.
        std::set<int> covered;
        for (const auto& g : groups)
          for (int r : g) EXPECT_TRUE(covered.insert(r).second) << "rank " << r;
        for (int r = 0; r < k.world; ++r) {
          const bool end_stage = b.at[r].pp == 0 || b.at[r].pp == k.pp - 1;
          EXPECT_EQ(covered.count(r) == 1, end_stage) << "rank " << r;
        }
      } else {
        expect_partition(groups, k.world, group_kind_name(kind));
      }
      for (size_t i = 0; i < groups.size(); ++i)
        for (int r : groups[i]) EXPECT_EQ(&m.group_of(kind, r), &groups[i]) << "rank " << r;
    }
    // Megatron's requirement: the expert grid pipelines like the dense grid.
    EXPECT_EQ(b.group_by([](const MeshCoords& c) {
      return std::make_tuple(c.expert_tp, c.ep, c.expert_dp);
    }),
              m.all_groups(GroupKind::kPipeline));
  }
}

// --- errors ------------------------------------------------------------------------------------

// The message, or "" if no tessera::Error was thrown.
std::string error_of(int world, ParallelConfig cfg) {
  try {
    MeshLayout m(world, cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MeshLayoutTest, ErrorsNameTheFlagsAndNumbers) {
  ParallelConfig cfg;
  cfg.tensor = 2;
  cfg.pipeline = 2;
  std::string msg = error_of(6, cfg);
  EXPECT_NE(msg.find("world size 6 is not divisible by TP*CP*PP = 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--tensor-model-parallel-size 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--pipeline-model-parallel-size 2"), std::string::npos) << msg;

  cfg = ParallelConfig{};
  cfg.context = 2;
  cfg.expert = 3;
  msg = error_of(12, cfg);  // DP 6, CP 2: DP*CP = 12 is divisible by 3 -> valid
  EXPECT_EQ(msg, "");
  cfg.expert = 8;  // 12 % 8 != 0
  msg = error_of(12, cfg);
  EXPECT_NE(msg.find("--expert-model-parallel-size 8 does not divide DP*CP = 12"),
            std::string::npos)
      << msg;

  cfg = ParallelConfig{};
  cfg.tensor = 2;
  cfg.expert = 2;
  cfg.expert_tensor = 3;  // ETP*EP*PP = 6 does not divide 8
  msg = error_of(8, cfg);
  EXPECT_NE(msg.find("world size 8 is not divisible by ETP*EP*PP = 6"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--expert-tensor-parallel-size 3"), std::string::npos) << msg;

  cfg = ParallelConfig{};
  cfg.tensor = 0;
  msg = error_of(8, cfg);
  EXPECT_NE(msg.find("--tensor-model-parallel-size must be >= 1, got 0"), std::string::npos) << msg;
  cfg = ParallelConfig{};
  cfg.pipeline = -1;
  msg = error_of(8, cfg);
  EXPECT_NE(msg.find("--pipeline-model-parallel-size must be >= 1, got -1"), std::string::npos)
      << msg;
  cfg = ParallelConfig{};
  cfg.context = 0;
  EXPECT_NE(error_of(8, cfg).find("--context-parallel-size"), std::string::npos);
  cfg = ParallelConfig{};
  cfg.expert = 0;
  EXPECT_NE(error_of(8, cfg).find("--expert-model-parallel-size"), std::string::npos);
  cfg = ParallelConfig{};
  cfg.expert_tensor = -2;
  EXPECT_NE(error_of(8, cfg).find("--expert-tensor-parallel-size"), std::string::npos);
  EXPECT_NE(error_of(0, ParallelConfig{}).find("world size must be >= 1, got 0"),
            std::string::npos);
  // Every message is one line.
  cfg = ParallelConfig{};
  cfg.tensor = 3;
  msg = error_of(8, cfg);
  EXPECT_FALSE(msg.empty());
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(MeshLayoutTest, FormatMeshListsRanksAndGroups) {
  ParallelConfig cfg;
  cfg.tensor = 2;
  cfg.pipeline = 2;
  const std::string text = format_mesh(MeshLayout(8, cfg));
  EXPECT_NE(text.find("world 8 = TP 2 x CP 1 x DP 2 x PP 2"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntp          [0,1] [2,3] [4,5] [6,7]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ndp          [0,2] [1,3] [4,6] [5,7]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\npp          [0,4] [1,5] [2,6] [3,7]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nmp          [0,1,4,5] [2,3,6,7]\n"), std::string::npos) << text;
  //                      rank   tp   cp   dp   pp  etp   ep  edp
  EXPECT_NE(text.find("\n     6    0    0    1    1    0    0    1\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace tessera::comm
