// Data-parallel gradient reduction (distributed::DataParallelGrads) with DP = the world size:
// after two micro-batches per rank the reduced gradients equal the single-process gradients of
// the whole global batch (ZeRO 0: everywhere; ZeRO 1 and 2: on the rank's own part of every
// bucket); ZeRO 0-1 communicate nothing before the last micro-batch, ZeRO 2 reduce-scatters
// every micro-batch and keeps only its own parts resident; with overlap, buckets are already
// reduced while backward runs; and the bytes sent per iteration are the ZeRO paper's 2Ψ
// (all-reduce, or reduce-scatter + all-gather; ZeRO 2: one more Ψ per extra micro-batch) in the
// runtime's accounting.
// ranks: 2 4
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "dist_main.h"
#include "small_model.h"
#include "tessera/comm/parallel_state.h"
#include "tessera/core/memory.h"
#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/model/gpt_model.h"
#include "tessera/optim/optimizer.h"
#include "testing/numeric.h"

namespace tessera::distributed {
namespace {

using comm::OpType;
using comm::ProcessGroup;

void check(int stage, bool overlap) {
  auto world = ProcessGroup::world();
  comm::ParallelState mesh(world, comm::MeshLayout(world->size(), {}));
  auto dp = mesh.group(comm::GroupKind::kData);
  const int n = dp->size(), d = dp->rank();
  const model::ModelConfig cfg = testing::small_model_config();
  const int64_t mbs = 1, micro = 2, global = mbs * micro * n;
  const float scale = 1.0f / (global * cfg.seq_length);
  const bool sharded = stage >= 1;

  model::GPTModel ref(cfg, DType::kF32, 11);
  ref.params().zero_grads();
  for (int64_t s = 0; s < global; ++s) testing::small_model_micro_batch(ref, s, 1, scale);

  // Buckets of 1/4 MiB of fp32, so that stage 2 has whole pages to give back.
  model::GPTModel model(cfg, DType::kF32, 11, {}, n);
  DataParallelGrads grads(model.params(), dp, ShardingPlan::for_stage(stage, 65536, overlap));
  ASSERT_GT(grads.num_buckets(), 1);
  grads.start_iteration();
  dp->reset_stats();
  const double psi = static_cast<double>(model.params().numel());
  const double one_pass = (n - 1.0) / n * 4 * psi;  // a reduce-scatter or all-gather of Ψ fp32
  for (int64_t m = 0; m < micro; ++m) {
    const bool reduce = grads.reduces_in(m, micro);
    EXPECT_EQ(reduce, stage == 2 || m == micro - 1);
    const int64_t calls_before =
        dp->stats().calls_of(sharded ? OpType::kReduceScatter : OpType::kAllReduce);
    if (reduce) model.set_grads_ready_hook([&](int64_t offset) { grads.grads_ready(offset); });
    testing::small_model_micro_batch(model, (m * n + d) * mbs, mbs, scale);  // Megatron's order
    model.set_grads_ready_hook(nullptr);
    const int64_t issued =
        dp->stats().calls_of(sharded ? OpType::kReduceScatter : OpType::kAllReduce) - calls_before;
    EXPECT_EQ(issued, reduce && overlap ? grads.num_buckets() : 0) << "micro-batch " << m;
    if (reduce) {
      grads.finish();
    } else {
      EXPECT_EQ(dp->stats().total_bytes(), 0) << "communication before the last micro-batch";
    }
    if (stage == 2) {
      EXPECT_NEAR(static_cast<double>(dp->stats().total_bytes()), (m + 1) * one_pass,
                  0.02 * one_pass);
      // Only the owned parts (and partial pages at their edges) stay resident.
      EXPECT_LE(testing::resident_outside(model.params().flat_grads(), grads.owned()),
                2 * 4096 * 2 * grads.num_buckets());
    }
  }

  const float* got = model.params().flat_grads().data<float>();
  const float* want = ref.params().flat_grads().data<float>();
  double max_err = 0, max_ref = 0;
  for (const FlatRange& r : grads.owned())
    for (int64_t i = r.begin; i < std::min(r.end, ref.params().numel()); ++i) {
      max_err = std::max(max_err, std::fabs(double(got[i]) - want[i]));
      max_ref = std::max(max_ref, std::fabs(double(want[i])));
    }
  EXPECT_LE(max_err, 1e-5 * max_ref);

  // Bytes: 2Ψ per iteration in the ZeRO paper's terms (one all-reduce, or a reduce-scatter plus
  // the all-gather of the updated fp32 parameters); ZeRO 2 reduce-scatters once per micro-batch.
  optim::Optimizer::Ranges owned;
  if (sharded)
    for (const FlatRange& r : grads.owned()) owned.push_back({r.begin, r.end});
  optim::Optimizer opt(model.params(), {}, owned);
  opt.step(1e-3, 1.0f);
  grads.gather_values();
  const double expected = (stage == 2 ? micro + 1 : 2) * one_pass;
  EXPECT_NEAR(static_cast<double>(dp->stats().total_bytes()), expected, 0.02 * expected);
  if (sharded) {
    // Every rank holds the same updated parameters again.
    std::vector<float> mine(model.params().flat_values().data<float>(),
                            model.params().flat_values().data<float>() + model.params().numel());
    Tensor first = model.params().flat_values().clone(MemoryCategory::kOther);
    dp->broadcast(first, 0).wait();
    EXPECT_EQ(mine, std::vector<float>(first.data<float>(), first.data<float>() + first.numel()));
  }
}

TEST(DataParallelGrads, AllReduceMatchesSingleProcess) { check(0, true); }
TEST(DataParallelGrads, AllReduceWithoutOverlap) { check(0, false); }
TEST(DataParallelGrads, ShardedOptimizerMatchesSingleProcess) { check(1, true); }
TEST(DataParallelGrads, ShardedOptimizerWithoutOverlap) { check(1, false); }
TEST(DataParallelGrads, ShardedGradientsMatchSingleProcess) { check(2, true); }
TEST(DataParallelGrads, ShardedGradientsWithoutOverlap) { check(2, false); }

}  // namespace
}  // namespace tessera::distributed

int main(int argc, char** argv) { return tessera::testing::run_distributed_tests(argc, argv); }
