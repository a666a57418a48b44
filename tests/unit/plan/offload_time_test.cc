// NVMe optimizer offload's replay (plan/offload_time.h) on numbers small enough to follow by hand:
// n = 1000 elements, two fp32 arrays (state 8000 bytes, gradients 4000), the device reading 1000
// and writing 2000 bytes a second; backward starts at 10 s, the step at 20 s, the update takes 1 s.
#include "tessera/plan/offload_time.h"

#include <gtest/gtest.h>

#include "tessera/core/error.h"

namespace tessera::plan {
namespace {

const StorageRates kDisk{1000, 2000};

// Backward starting at `backward` writes all 4000 bytes of gradients then; the step at `step`.
IterationTimes iteration(double backward, double step, double update) {
  return IterationTimes{{{backward, 4000}}, step, update};
}

OptimizerSwapShape one_group(bool pipeline_read, bool pipeline_write) {
  return OptimizerSwapShape{1000, 2, 1e9, 2, pipeline_read, pipeline_write};
}

TEST(OptimizerSwap, OneSubGroupByHand) {
  // prefetch() reads the state at the start (8 s, done long before the step); the gradients are
  // written at 10-12 s; the step reads the gradients (4 s), updates (1 s) and writes the state
  // back (4 s), waiting for it: 9 s, of which 8 are I/O. Every iteration alike.
  const OptimizerSwapTimes t =
      simulate_optimizer_swap(one_group(false, false), iteration(10, 20, 1), kDisk);
  EXPECT_DOUBLE_EQ(t.boundary_wait, 0);
  EXPECT_DOUBLE_EQ(t.visit, 9);
  EXPECT_DOUBLE_EQ(t.exposed(), 8);
  EXPECT_DOUBLE_EQ(t.read_bytes, 12000);
  EXPECT_DOUBLE_EQ(t.write_bytes, 12000);
}

TEST(OptimizerSwap, PipelinedWriteOfOneSubGroupStopsThePrefetch) {
  // With pipeline_write the step leaves its write in flight; the next iteration's prefetch()
  // stops at the sub-group being written, so its step reads state and gradients itself:
  // iteration 1 ends at 25 s (write done 29); iteration 2: gradients written 35-37, the step at
  // 45 reads 12 s, updates 1 s, ends at 58 (13 s). Iteration 3 starts at 58 with the write in
  // flight again: the same 13 s.
  const OptimizerSwapTimes t =
      simulate_optimizer_swap(one_group(false, true), iteration(10, 20, 1), kDisk);
  EXPECT_DOUBLE_EQ(t.visit, 13);
  EXPECT_DOUBLE_EQ(t.read_bytes, 12000);
}

TEST(OptimizerSwap, TheStepWaitsForTheGradientsWrites) {
  // The step starts 1 s after backward: the 2 s of gradient writes leave it 1 s to wait.
  const OptimizerSwapTimes t =
      simulate_optimizer_swap(one_group(false, false), iteration(10, 11, 1), kDisk);
  EXPECT_DOUBLE_EQ(t.boundary_wait, 1);
}

TEST(OptimizerSwap, PipelinedSubGroupsOverlapReadsWithUpdates) {
  // Four sub-groups of 250 elements (state 2000 bytes: 2 s to read, 1 s to write; gradients 1 s
  // to read), 3 buffers, an update of 4 s (1 s a sub-group). Serial: prefetch() read sub-groups 0
  // and 1's state while the model computed, so the step reads their gradients (1 s), updates
  // (1 s) and writes (1 s), then reads 2 and 3 whole (3 s) before updating and writing them:
  // 2 x 3 + 2 x 5 = 16 s.
  const OptimizerSwapShape serial{1000, 2, 250, 3, false, false};
  EXPECT_DOUBLE_EQ(simulate_optimizer_swap(serial, iteration(10, 20, 4), kDisk).visit, 16);
  // Both pipelines. In a steady run every buffer still has its write in flight when the next
  // iteration starts, so prefetch() reads nothing. At 20 s the step reads 0 (20-23) and ahead 1
  // (23-26) and 2 (26-29); 0 is updated 23-24 and written behind the reads (29-30). Reading 3
  // ahead needs 0's buffer: the step waits for that write (30), reads 3 (30-33), updates 1
  // (30-31), 2 (31-32) and 3 (33-34): 14 s.
  const OptimizerSwapShape pipelined{1000, 2, 250, 3, true, true};
  EXPECT_DOUBLE_EQ(simulate_optimizer_swap(pipelined, iteration(10, 20, 4), kDisk).visit, 14);
}

// ZeRO 3 parameter offload, one pass over three units of 1000 bytes, each computing 2 s, pieces
// of 1000 bytes, 2 buffers. The first unit's read is waited for; the next two are read ahead
// while it computes.
TEST(ParamSwapReplay, ReadsAheadHideBehindCompute) {
  const std::vector<SwappedUnit> pass(3, SwappedUnit{1000, 1, 2});
  const ParamSwapShape no_window{1000, 2, 0};
  // 1000 B/s: unit 0 read 0-1; 1 and 2 read 1-2 and 2-3 while 0 computes (1-3): only the first
  // second waits.
  EXPECT_DOUBLE_EQ(simulate_param_pass(pass, no_window, kDisk), 1);
  // 250 B/s: reads 0-4, 4-8, 8-12; computes 4-6, 8-10, 12-14: 8 s of waiting.
  EXPECT_DOUBLE_EQ(simulate_param_pass(pass, no_window, StorageRates{250, 2000}), 8);
  // A prefetch window of 10 elements gathers units 1 and 2 ahead at unit 0's acquisition, each
  // waiting for its read (done at 2 and 3): 3 s, the reads no longer behind compute.
  EXPECT_DOUBLE_EQ(simulate_param_pass(pass, ParamSwapShape{1000, 2, 10}, kDisk), 3);
  // After the gathers ahead free their buffers, the reads ahead go on: four units, 1 s of compute
  // each, a window of 2 elements. Unit 0 read 0-1; 1 and 2 read ahead (1-2, 2-3) and gathered
  // (waited for: 3); 3 read into a freed buffer 3-4 while 0 computes (3-4); then 1-3 compute
  // 4-7 with nothing to wait for: 3 s.
  EXPECT_DOUBLE_EQ(simulate_param_pass(std::vector<SwappedUnit>(4, SwappedUnit{1000, 1, 1}),
                                       ParamSwapShape{1000, 2, 2}, kDisk),
                   3);
  // A part of more pieces than buffers is read piece by piece: 3 pieces, 2 buffers: 0-1, 1-2,
  // then the third into the first's buffer, 2-3; the unit computes 3-4.
  EXPECT_DOUBLE_EQ(simulate_param_pass({SwappedUnit{3000, 1, 1}}, no_window, kDisk), 3);
  // Units kept in memory read nothing.
  EXPECT_DOUBLE_EQ(
      simulate_param_pass(std::vector<SwappedUnit>(3, SwappedUnit{0, 1, 2}), no_window, kDisk), 0);
}

TEST(OptimizerSwap, NoStorageRatesIsOneError) {
  try {
    simulate_optimizer_swap(one_group(false, false), iteration(10, 20, 1), StorageRates{});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "the machine description has no storage rates for NVMe offload: measure them "
                 "with tessera-plan --calibrate --nvme-path DIR (DIR on the offload's device)");
  }
}

}  // namespace
}  // namespace tessera::plan
