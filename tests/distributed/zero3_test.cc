// ZeRO stage 3 (distributed::Zero3Params with DataParallelGrads at stage 3), DP = the world size:
// one iteration's owned gradients equal the single-process gradients of the global batch; the
// model is built with only the rank's parts initialised (zero.Init) and outside the units in use
// only those parts are ever resident; the buffers handed to MPI follow the gather schedule exactly
// (every unit gathered before its forward, the layers again before their backward, the head once
// for its fused forward and backward, the embedding not for its backward (it reads no values) but
// once more for a tied output layer, plus one reduce-scatter of Ψ per micro-batch); and after the
// optimizer step every unit gathers to the same values on every rank.
// ranks: 2 4
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "dist_main.h"
#include "small_model.h"
#include "tessera/comm/parallel_state.h"
#include "tessera/core/error.h"
#include "tessera/core/memory.h"
#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/distributed/zero3_params.h"
#include "tessera/model/gpt_model.h"
#include "tessera/optim/optimizer.h"

namespace tessera::distributed {
namespace {

using comm::OpType;
using comm::ProcessGroup;

// Pages that may stay resident per unit outside the owned part: the partial pages at the two
// edges of each of the (up to) two unowned pieces.
constexpr int64_t kEdgePages = 4;

void check(bool tied, bool overlap) {
  auto world = ProcessGroup::world();
  comm::ParallelState mesh(world, comm::MeshLayout(world->size(), {}));
  auto dp = mesh.group(comm::GroupKind::kData);
  const int n = dp->size(), d = dp->rank();
  const model::ModelConfig cfg = testing::small_model_config(tied);
  const float scale = 1.0f / (n * cfg.seq_length);

  model::GPTModel ref(cfg, DType::kF32, 11);
  ref.params().zero_grads();
  for (int64_t s = 0; s < n; ++s) testing::small_model_micro_batch(ref, s, 1, scale);

  // Built as ZeRO 3 builds it: only this rank's parts initialised, nothing else resident.
  model::GPTModel model(
      cfg, DType::kF32, 11, {}, n, {},
      [&](const std::vector<std::pair<int64_t, int64_t>>& u, const std::vector<bool>&) {
        return Zero3Params::resident_ranges(u, n, d, 0);
      });
  std::vector<FlatRange> units;
  for (const auto& [b, e] : model.units()) units.push_back({b, e});
  DataParallelGrads grads(model.params(), dp, ShardingPlan::for_stage(3, 0, overlap), units);
  EXPECT_LE(testing::resident_outside(model.params().flat_values(), grads.owned()),
            kEdgePages * 4096 * static_cast<int64_t>(units.size()));
  ShardingPlan plan = ShardingPlan::for_stage(3, 0, overlap);
  plan.persistence_threshold = 0;
  plan.prefetch_elems = plan.max_live_elems = int64_t{1} << 40;
  Zero3Params params(model.params(), dp, units, plan);
  model::ChunkRunner runner(model);
  runner.set_param_access(&params);

  const auto unowned_resident = [&] {
    return testing::resident_outside(model.params().flat_values(), grads.owned());
  };
  EXPECT_LE(unowned_resident(), kEdgePages * 4096 * static_cast<int64_t>(units.size()));

  grads.start_iteration();
  dp->reset_stats();
  runner.set_grads_ready_hook([&](int64_t offset) { grads.grads_ready(offset); });
  testing::small_model_micro_batch(runner, d, 1, scale);
  runner.set_grads_ready_hook(nullptr);
  grads.finish();
  EXPECT_EQ(params.live_elems(), 0);
  EXPECT_LE(unowned_resident(), kEdgePages * 4096 * static_cast<int64_t>(units.size()));

  // Bytes handed to MPI: a gather of unit u sends this rank's part (u/n fp32 elements; units are
  // padded to multiples of n) and receives the unit; a reduce-scatter the reverse.
  const auto whole = [&](int u) { return units[u].size() * 4; };
  const auto part = [&](int u) { return units[u].size() / n * 4; };
  const int L = static_cast<int>(units.size()) - 2;
  // The gather schedule.
  std::vector<int> gathered;
  for (int u = 0; u < L + 2; ++u) gathered.push_back(u);  // forward
  for (int u = 1; u <= L; ++u) gathered.push_back(u);     // backward of each layer
  if (tied) gathered.push_back(0);                        // the output layer is the embedding
  int64_t gather_sent = 0, gather_received = 0, scatter_sent = 0, scatter_received = 0;
  for (int u : gathered) {
    gather_sent += part(u);
    gather_received += whole(u);
  }
  for (int u = 0; u < L + 2; ++u) {
    scatter_sent += whole(u);
    scatter_received += part(u);
  }
  const comm::CommStats st = dp->stats();
  const auto gathers = static_cast<int64_t>(gathered.size());
  EXPECT_EQ(st.issued_of(OpType::kAllGather), gathers);
  EXPECT_EQ(st.calls_of(OpType::kAllGather), gathers);
  EXPECT_EQ(st.sent_bytes_of(OpType::kAllGather), gather_sent);
  EXPECT_EQ(st.received_bytes_of(OpType::kAllGather), gather_received);
  EXPECT_EQ(st.calls_of(OpType::kReduceScatter), static_cast<int64_t>(units.size()));
  EXPECT_EQ(st.sent_bytes_of(OpType::kReduceScatter), scatter_sent);
  EXPECT_EQ(st.received_bytes_of(OpType::kReduceScatter), scatter_received);
  EXPECT_EQ(st.total_sent_bytes(), gather_sent + scatter_sent);
  // In the ring model: (n-1)/n of every gathered or reduce-scattered unit.
  int64_t ring = 0;
  for (int u : gathered) ring += (n - 1) * part(u);
  for (int u = 0; u < L + 2; ++u) ring += (n - 1) * part(u);
  EXPECT_EQ(comm::ring_bytes(OpType::kAllGather, n, gather_received) +
                comm::ring_bytes(OpType::kReduceScatter, n, scatter_sent),
            ring);

  const float* got = model.params().flat_grads().data<float>();
  double max_err = 0, max_ref = 0;
  for (const FlatRange& r : grads.owned()) {
    // The model's units are padded (DP > 1): map each owned element back through its parameter.
    for (const model::Parameter& p : model.params().all()) {
      const int64_t b = std::max(r.begin, p.offset), e = std::min(r.end, p.offset + p.numel());
      const model::Parameter& rp = ref.params().get(p.name);
      for (int64_t i = b; i < e; ++i) {
        const float want = rp.grad.data<float>()[i - p.offset];
        max_err = std::max(max_err, std::fabs(double(got[i]) - want));
        max_ref = std::max(max_ref, std::fabs(double(want)));
      }
    }
  }
  EXPECT_LE(max_err, 1e-5 * max_ref);

  optim::Optimizer::Ranges owned;
  for (const FlatRange& r : grads.owned()) owned.push_back({r.begin, r.end});
  optim::Optimizer opt(model.params(), {}, owned);
  params.quiesce();
  opt.step(1e-3, 1.0f);
  params.after_step();
  // Every unit gathers to the same values on every rank.
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    params.acquire(u);
    Tensor mine = model.params()
                      .flat_values()
                      .slice_rows(units[u].begin, units[u].end)
                      .clone(MemoryCategory::kOther);
    Tensor first = mine.clone(MemoryCategory::kOther);
    dp->broadcast(first, 0).wait();
    EXPECT_EQ(0, std::memcmp(mine.raw(), first.raw(), mine.nbytes())) << "unit " << u;
    params.release(u);
  }
  // Evaluation passes leave nothing gathered behind (no stray prefetch), and every gather they
  // issue is one the pass needs: L + 2 units, plus the embedding again when tied.
  std::vector<int32_t> tokens(cfg.seq_length, 1), targets(cfg.seq_length, 2);
  const model::Batch batch{tokens.data(), targets.data(), nullptr, 1, cfg.seq_length};
  for (int pass = 0; pass < 2; ++pass) {
    dp->reset_stats();
    runner.forward_loss(batch, model.context(1, cfg.seq_length, 0, 5, 1, false));
    EXPECT_EQ(params.live_elems(), 0);
    EXPECT_EQ(dp->stats().issued_of(OpType::kAllGather), L + 2 + (tied ? 1 : 0));
    EXPECT_EQ(dp->stats().calls_of(OpType::kAllGather), L + 2 + (tied ? 1 : 0));
  }
  runner.set_param_access(nullptr);
}

TEST(Zero3, TiedModelMatchesSingleProcess) { check(true, true); }
TEST(Zero3, UntiedModelWithoutOverlap) { check(false, false); }

// DeepSpeed's meanings, on the gathered elements after each acquisition of a pass over the three
// layer units (L each): stage3_prefetch_bucket_size bounds the units gathered ahead and not yet
// used (several at once when they fit), stage3_max_live_parameters bounds every gather, and an
// acquisition that would exceed it drops prefetched units rather than the limit giving way.
TEST(Zero3, PrefetchBucketAndLiveLimitAsDeepSpeed) {
  auto world = ProcessGroup::world();
  comm::ParallelState mesh(world, comm::MeshLayout(world->size(), {}));
  auto dp = mesh.group(comm::GroupKind::kData);
  const int n = dp->size();
  const model::ModelConfig cfg = testing::small_model_config(false);
  model::GPTModel model(cfg, DType::kF32, 11, {}, n);
  std::vector<FlatRange> units;
  for (const auto& [b, e] : model.units()) units.push_back({b, e});
  const int64_t L = units[1].size();
  ASSERT_EQ(units[2].size(), L);
  ASSERT_EQ(units[3].size(), L);
  const std::vector<int> pass = {1, 2, 3};
  const int64_t huge = int64_t{1} << 40;
  // gathered(prefetch, max_live): the live elements after acquiring 1, then 2 (1 still held).
  // plan(prefetch, max_live): stage 3, every unit sharded (no persistence threshold).
  const auto plan = [](int64_t prefetch, int64_t max_live) {
    ShardingPlan p = ShardingPlan::for_stage(3, 0, true);
    p.persistence_threshold = 0;
    p.prefetch_elems = prefetch;
    p.max_live_elems = max_live;
    return p;
  };
  const auto gathered = [&](int64_t prefetch, int64_t max_live) {
    Zero3Params params(model.params(), dp, units, plan(prefetch, max_live));
    params.begin_pass(pass);
    params.acquire(1);
    const int64_t after_first = params.live_elems();
    params.acquire(2);
    const int64_t after_second = params.live_elems();
    params.release(2);
    params.release(1);
    params.quiesce();
    EXPECT_EQ(params.live_elems(), 0);
    return std::vector<int64_t>{after_first, after_second};
  };
  // A bucket of two layers prefetches both following layers at once; of one, one at a time;
  // smaller than a layer, none.
  EXPECT_EQ(gathered(2 * L, huge), (std::vector<int64_t>{3 * L, 3 * L}));
  EXPECT_EQ(gathered(L, huge), (std::vector<int64_t>{2 * L, 3 * L}));
  EXPECT_EQ(gathered(L - 1, huge), (std::vector<int64_t>{L, 2 * L}));
  // A live limit of two layers: one prefetched after the first acquisition, and with 1 and 2 in
  // use nothing more (the third stays for its own acquisition).
  EXPECT_EQ(gathered(2 * L, 2 * L), (std::vector<int64_t>{2 * L, 2 * L}));

  // Every gather keeps to the limit: with 1 in use and 2 prefetched (limit 2L), acquiring 3 out
  // of the pass's order drops the prefetched 2 instead of holding three layers.
  {
    Zero3Params params(model.params(), dp, units, plan(huge, 2 * L));
    params.begin_pass(pass);
    params.acquire(1);
    ASSERT_EQ(params.live_elems(), 2 * L);
    params.acquire(3);
    EXPECT_EQ(params.live_elems(), 2 * L);
    params.release(3);
    params.release(1);
    // Units in use stay whatever the limit: both held at once go above it.
    params.acquire(1);
    params.acquire(2);
    params.acquire(3);
    EXPECT_EQ(params.live_elems(), 3 * L);
    params.release(3);
    params.release(2);
    params.release(1);
    params.quiesce();
  }
  // A limit below the largest unit cannot hold a step: refused when built.
  const int64_t largest = std::max({units[0].size(), units[1].size(), units[4].size()});
  EXPECT_THROW(Zero3Params(model.params(), dp, units, plan(huge, largest - 1)), Error);
}

}  // namespace
}  // namespace tessera::distributed

int main(int argc, char** argv) { return tessera::testing::run_distributed_tests(argc, argv); }
