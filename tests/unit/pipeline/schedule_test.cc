#include "tessera/pipeline/schedule.h"

#include <gtest/gtest.h>

#include "tessera/core/error.h"

namespace tessera::pipeline {
namespace {

std::vector<std::vector<Step>> all_lists(ScheduleKind kind, const ScheduleShape& s) {
  std::vector<std::vector<Step>> lists;
  for (int r = 0; r < s.pp_size; ++r) lists.push_back(build_schedule(kind, s, r));
  return lists;
}

int count(const std::vector<Step>& steps, Action a) {
  int n = 0;
  for (const Step& s : steps) n += s.action == a ? 1 : 0;
  return n;
}

// Every (P, M, V) combination runs without deadlock, every micro-batch of every chunk is
// forwarded and backwarded exactly once per rank, and the bubble is the theory's: with
// communication free and backward = 2 x forward, 1F1B and interleaved reach
// (P - 1) / (V M + P - 1) exactly.
TEST(PipelineSchedule, EveryShapeCompletesWithTheTheoreticalBubble) {
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
    for (int P : {1, 2, 3, 4, 8}) {
      for (int M : {1, 2, 3, 4, 6, 8, 16}) {
        for (int V : {1, 2, 3}) {
          const ScheduleShape s{P, M, V};
          if (kind == ScheduleKind::kInterleaved ? (V < 2 || P < 2 || M % P != 0) : V != 1)
            continue;
          SCOPED_TRACE(std::string(schedule_name(kind)) + " P=" + std::to_string(P) +
                       " M=" + std::to_string(M) + " V=" + std::to_string(V));
          const auto lists = all_lists(kind, s);
          for (const auto& l : lists) {
            EXPECT_EQ(count(l, Action::kForward), M * V);
            EXPECT_EQ(count(l, Action::kBackward), M * V);
          }
          const Simulation sim = simulate(s, lists);
          ASSERT_FALSE(sim.deadlock) << sim.problem;
          EXPECT_NEAR(sim.bubble_fraction(), theoretical_bubble(s), 1e-12);
          // Work: M V (1 + 2) per rank; the makespan adds the bubble.
          EXPECT_NEAR(sim.makespan * (1 - theoretical_bubble(s)), 3.0 * M * V, 1e-9);
        }
      }
    }
  }
}

// 1F1B holds at most P - r micro-batches' activations on rank r; GPipe holds all M.
TEST(PipelineSchedule, InFlightMicrobatches) {
  const ScheduleShape s{4, 8, 1};
  const Simulation f1b = simulate(s, all_lists(ScheduleKind::kOneFOneB, s));
  const Simulation gpipe = simulate(s, all_lists(ScheduleKind::kGPipe, s));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(f1b.peak_in_flight[r], 4 - r);
    EXPECT_EQ(gpipe.peak_in_flight[r], 8);
  }
}

// Rank 1 of a 1F1B pipeline of 4 with 4 micro-batches, written out by hand: warmup
// min(P - r - 1, M) = 2 forwards, then F B F B, then the 2 last backwards; each receive posted
// one compute operation ahead.
TEST(PipelineSchedule, OneFOneBRankOneByHand) {
  const auto steps = build_schedule(ScheduleKind::kOneFOneB, {4, 4, 1}, 1);
  std::string got;
  for (const Step& s : steps) {
    const char* a = "";
    switch (s.action) {
      case Action::kRecvActivation:
        a = "ra";
        break;
      case Action::kForward:
        a = "F";
        break;
      case Action::kSendActivation:
        a = "sa";
        break;
      case Action::kRecvGrad:
        a = "rg";
        break;
      case Action::kBackward:
        a = "B";
        break;
      case Action::kSendGrad:
        a = "sg";
        break;
    }
    got += std::string(a) + std::to_string(s.microbatch) + " ";
  }
  EXPECT_EQ(got,
            "ra0 ra1 F0 sa0 ra2 F1 sa1 rg0 F2 sa2 ra3 B0 sg0 rg1 F3 sa3 rg2 B1 sg1 rg3 B2 sg2 "
            "B3 sg3 ");
}

// Interleaved, P = 2, V = 2, M = 4: Megatron's chunk order (groups of P micro-batches per
// chunk) and warmup 2(P - r - 1) + (V - 1)P.
TEST(PipelineSchedule, InterleavedOrderAndWarmup) {
  const ScheduleShape s{2, 4, 2};
  const auto r0 = build_schedule(ScheduleKind::kInterleaved, s, 0);
  std::vector<std::pair<int, int>> forwards;  // (micro-batch, chunk) in order
  int warmup = 0;
  bool seen_backward = false;
  for (const Step& st : r0) {
    if (st.action == Action::kForward) {
      forwards.push_back({st.microbatch, st.chunk});
      if (!seen_backward) ++warmup;
    }
    if (st.action == Action::kBackward) seen_backward = true;
  }
  const std::vector<std::pair<int, int>> expected = {{0, 0}, {1, 0}, {0, 1}, {1, 1},
                                                     {2, 0}, {3, 0}, {2, 1}, {3, 1}};
  EXPECT_EQ(forwards, expected);
  // The steady phase starts with a forward, so one more precedes the first backward.
  EXPECT_EQ(warmup, 2 * (2 - 0 - 1) + (2 - 1) * 2 + 1);
}

TEST(PipelineSchedule, BadShapesAreErrors) {
  EXPECT_THROW(validate_schedule(ScheduleKind::kInterleaved, {2, 3, 2}), Error);  // M % P
  EXPECT_THROW(validate_schedule(ScheduleKind::kInterleaved, {2, 4, 1}), Error);  // V < 2
  EXPECT_THROW(validate_schedule(ScheduleKind::kOneFOneB, {2, 4, 2}), Error);
  EXPECT_THROW(parse_schedule_kind("zb"), Error);
  EXPECT_NO_THROW(validate_schedule(ScheduleKind::kInterleaved, {2, 4, 2}));
}

}  // namespace
}  // namespace tessera::pipeline

namespace tessera::pipeline {
namespace {

// Each rank's own chunk times and a transfer delay (the step-time model's use), worked by hand:
// GPipe, 2 ranks, 1 micro-batch. Rank 0 forwards in [0, 1], its activation arrives at 1.5; rank
// 1 forwards in [1.5, 3.5] and backwards in [3.5, 6.5]; the gradient arrives at 7; rank 0
// backwards in [7, 11].
TEST(PipelineSchedule, SimulatesOwnTimesAndTransfersByHand) {
  const ScheduleShape shape{2, 1, 1};
  std::vector<std::vector<Step>> lists;
  for (int r = 0; r < 2; ++r) lists.push_back(build_schedule(ScheduleKind::kGPipe, shape, r));
  OperationTimes times;
  times.compute = [](int rank, int, bool forward) {
    return rank == 0 ? (forward ? 1.0 : 4.0) : (forward ? 2.0 : 3.0);
  };
  times.transfer = 0.5;
  const Simulation sim = simulate(shape, lists, times);
  ASSERT_FALSE(sim.deadlock) << sim.problem;
  EXPECT_DOUBLE_EQ(sim.makespan, 11.0);
  EXPECT_DOUBLE_EQ(sim.finish[0], 11.0);
  EXPECT_DOUBLE_EQ(sim.finish[1], 6.5);
  EXPECT_DOUBLE_EQ(sim.busy[0], 5.0);
  EXPECT_DOUBLE_EQ(sim.busy[1], 5.0);
  EXPECT_DOUBLE_EQ(sim.idle[1], 6.0);
}

}  // namespace
}  // namespace tessera::pipeline
