// ParallelState under MPI: for several layouts at the job's world size, every group this rank
// gets has exactly the world ranks MeshLayout (checked against Megatron's table in the unit
// test) gives for it, and a collective over it reaches exactly those ranks: the sum of the
// members' world ranks, all-reduced over the group, equals the sum over the layout's group.
// ranks: 1 2 4 8
#include "tessera/comm/parallel_state.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/core/error.h"
#include "tessera/core/tensor.h"

namespace tessera::comm {
namespace {

std::shared_ptr<ProcessGroup> g_world;

ParallelConfig config(int tp, int cp, int ep, int pp, int etp = 0) {
  ParallelConfig c;
  c.tensor = tp;
  c.context = cp;
  c.expert = ep;
  c.pipeline = pp;
  c.expert_tensor = etp;
  return c;
}

std::string describe(const ParallelConfig& c) {
  return "TP " + std::to_string(c.tensor) + " CP " + std::to_string(c.context) + " EP " +
         std::to_string(c.expert) + " PP " + std::to_string(c.pipeline) + " ETP " +
         std::to_string(c.expert_tensor);
}

// Candidate layouts; those whose sizes do not divide the job's world size are skipped. Every
// world size in {2, 4, 8} keeps at least five (checked below), including PP > 2 (middle
// stages without an embedding group), CP with EP, and ETP != TP.
std::vector<ParallelConfig> candidates() {
  return {config(1, 1, 1, 1), config(2, 1, 1, 1), config(1, 1, 1, 2),    config(1, 2, 2, 1),
          config(1, 1, 2, 1), config(2, 1, 1, 2), config(2, 2, 1, 1),    config(1, 2, 2, 2),
          config(1, 1, 1, 4), config(1, 1, 4, 1), config(2, 2, 1, 2),    config(2, 1, 2, 2),
          config(2, 1, 1, 4), config(1, 2, 4, 1), config(2, 1, 4, 1, 1), config(4, 2, 1, 1),
          config(2, 2, 2, 2)};
}

int64_t all_reduce_sum(ProcessGroup& group, int64_t value) {
  Tensor t = Tensor::zeros({1}, DType::kI64);
  t.data<int64_t>()[0] = value;
  group.all_reduce(t, ReduceOp::kSum).wait();
  return t.data<int64_t>()[0];
}

TEST(ParallelStateDistTest, GroupsMatchLayoutAndReduceOverTheRightRanks) {
  const int world_size = g_world->size();
  const int rank = g_world->rank();
  const std::vector<int>& world_ranks = g_world->world_ranks();
  int layouts_run = 0;
  for (const ParallelConfig& cfg : candidates()) {
    std::unique_ptr<MeshLayout> layout;
    try {
      layout = std::make_unique<MeshLayout>(world_size, cfg);
    } catch (const Error&) {
      continue;  // same decision on every rank: it depends only on sizes
    }
    SCOPED_TRACE(describe(cfg));
    ++layouts_run;
    const ParallelState ps(g_world, *layout);
    EXPECT_EQ(ps.rank(), rank);
    const MeshCoords c = ps.coords(), e = layout->coords(rank);
    EXPECT_EQ(c.tp, e.tp);
    EXPECT_EQ(c.cp, e.cp);
    EXPECT_EQ(c.dp, e.dp);
    EXPECT_EQ(c.pp, e.pp);
    EXPECT_EQ(c.expert_tp, e.expert_tp);
    EXPECT_EQ(c.ep, e.ep);
    EXPECT_EQ(c.expert_dp, e.expert_dp);
    for (GroupKind kind : kAllGroupKinds) {
      SCOPED_TRACE(group_kind_name(kind));
      std::vector<int> expected;
      for (int r : layout->group_of(kind, rank)) expected.push_back(world_ranks[r]);
      const std::shared_ptr<ProcessGroup>& group = ps.group(kind);
      if (expected.empty()) {  // only kEmbedding on a middle pipeline stage
        EXPECT_EQ(kind, GroupKind::kEmbedding);
        EXPECT_EQ(group, nullptr);
        EXPECT_FALSE(ps.in_embedding_group());
        continue;
      }
      ASSERT_NE(group, nullptr);
      EXPECT_EQ(group->world_ranks(), expected);
      EXPECT_EQ(group->name(), group_kind_name(kind));
      EXPECT_EQ(group->size(), static_cast<int>(expected.size()));
      EXPECT_EQ(expected.at(group->rank()), world_ranks[rank]);
      const int64_t want = std::accumulate(expected.begin(), expected.end(), int64_t{0});
      EXPECT_EQ(all_reduce_sum(*group, world_ranks[rank]), want);
    }
  }
  // World 1 has only the trivial layout; every other world size in the ranks line has >= 5.
  EXPECT_GE(layouts_run, world_size == 1 ? 1 : 5) << "world size " << world_size;
  if (rank == 0) std::printf("checked %d layouts at world size %d\n", layouts_run, world_size);
}

TEST(ParallelStateDistTest, LayoutForAnotherWorldSizeIsAUserError) {
  // Thrown before any collective, identically on every rank.
  const MeshLayout layout(g_world->size() * 2, ParallelConfig{});
  try {
    ParallelState ps(g_world, layout);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("needs " + std::to_string(g_world->size() * 2) + " ranks but the job has " +
                       std::to_string(g_world->size())),
              std::string::npos)
        << msg;
  }
}

// On ranks other than 0 the default printer is replaced by this: failures only, with the rank.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.message());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace tessera::comm

int main(int argc, char** argv) {
  using namespace tessera::comm;
  testing::InitGoogleTest(&argc, argv);
  g_world = ProcessGroup::world();
  if (g_world->rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(g_world->rank()));
  }
  const int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  // Every rank reports the same result: failed if any rank failed.
  tessera::Tensor flag = tessera::Tensor::zeros({1}, tessera::DType::kI32);
  flag.data<int32_t>()[0] = local_failed;
  g_world->all_reduce(flag, ReduceOp::kMax).wait();
  const int failed = flag.data<int32_t>()[0];
  if (g_world->rank() == 0 && failed && !local_failed) {
    std::fprintf(stderr, "FAILED on another rank (see [rank N] lines)\n");
  }
  g_world.reset();
  shutdown();
  return failed;
}
