// Data-parallel gradient reduction (distributed::DataParallelGrads) with DP = the world size:
// after two micro-batches per rank the reduced gradients equal the single-process gradients of
// the whole global batch (ZeRO 0: everywhere; ZeRO 1 and 2: on the rank's own part of every
// bucket); ZeRO 0-1 communicate nothing before the last micro-batch, ZeRO 2 reduce-scatters
// every micro-batch and keeps only its own parts resident; with overlap, buckets are already
// reduced while backward runs; the runtime's accounting shows exactly the buffers handed to MPI
// (the flat gradient buffer once per reduction, this rank's part of it for each all-gather); and
// in the ring model those are the ZeRO paper's 2Ψ per iteration (all-reduce, or reduce-scatter +
// all-gather; ZeRO 2: one more Ψ per extra micro-batch).
// ranks: 2 4
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
  model::ChunkRunner runner(model);
  DataParallelGrads grads(model.params(), dp, ShardingPlan::for_stage(stage, 65536, overlap));
  ASSERT_GT(grads.num_buckets(), 1);
  grads.start_iteration();
  dp->reset_stats();
  // The fp32 bytes of the flat buffer (Ψ, padded to a multiple of DP), which the buckets tile.
  const int64_t psi_bytes = 4 * model.params().numel();
  const OpType reduction = sharded ? OpType::kReduceScatter : OpType::kAllReduce;
  for (int64_t m = 0; m < micro; ++m) {
    const bool reduce = grads.reduces_in(m, micro);
    EXPECT_EQ(reduce, stage == 2 || m == micro - 1);
    const int64_t issued_before = dp->stats().issued_of(reduction);
    if (reduce) runner.set_grads_ready_hook([&](int64_t offset) { grads.grads_ready(offset); });
    testing::small_model_micro_batch(runner, (m * n + d) * mbs, mbs, scale);  // Megatron's order
    runner.set_grads_ready_hook(nullptr);
    const int64_t issued = dp->stats().issued_of(reduction) - issued_before;
    EXPECT_EQ(issued, reduce && overlap ? grads.num_buckets() : 0) << "micro-batch " << m;
    if (reduce) {
      grads.finish();
    } else {
      EXPECT_EQ(dp->stats().total_sent_bytes(), 0) << "communication before the last micro-batch";
    }
    if (stage == 2) {
      // Each micro-batch reduce-scatters the whole buffer (input) into this rank's parts.
      EXPECT_EQ(dp->stats().sent_bytes_of(reduction), (m + 1) * psi_bytes);
      EXPECT_EQ(dp->stats().received_bytes_of(reduction), (m + 1) * psi_bytes / n);
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

  // Bytes handed to MPI over the iteration, one call per bucket: ZeRO 0 all-reduces the buffer in
  // place; ZeRO 1-2 reduce-scatter it (once per reducing micro-batch) and all-gather the updated
  // fp32 parameters from this rank's parts.
  optim::Optimizer::Ranges owned;
  if (sharded)
    for (const FlatRange& r : grads.owned()) owned.push_back({r.begin, r.end});
  optim::Optimizer opt(model.params(), {}, owned);
  opt.step(1e-3, 1.0f);
  grads.gather_values();
  const comm::CommStats st = dp->stats();
  const int64_t reductions = stage == 2 ? micro : 1;
  EXPECT_EQ(st.calls_of(reduction), reductions * grads.num_buckets());
  EXPECT_EQ(st.sent_bytes_of(reduction), reductions * psi_bytes);
  EXPECT_EQ(st.received_bytes_of(reduction), reductions * (sharded ? psi_bytes / n : psi_bytes));
  EXPECT_EQ(st.calls_of(OpType::kAllGather), sharded ? grads.num_buckets() : 0);
  EXPECT_EQ(st.sent_bytes_of(OpType::kAllGather), sharded ? psi_bytes / n : 0);
  EXPECT_EQ(st.received_bytes_of(OpType::kAllGather), sharded ? psi_bytes : 0);
  EXPECT_EQ(st.total_sent_bytes(), reductions * psi_bytes + (sharded ? psi_bytes / n : 0));
  // In the ring model (comm::ring_bytes of the measured buffers) that is the ZeRO paper's 2Ψ per
  // iteration, (n-1)/n of Ψ's bytes per pass: one all-reduce (two passes), or a reduce-scatter
  // plus an all-gather; ZeRO 2 adds a reduce-scatter per extra micro-batch.
  const int64_t ring =
      comm::ring_bytes(reduction, n, st.sent_bytes_of(reduction)) +
      comm::ring_bytes(OpType::kAllGather, n, st.received_bytes_of(OpType::kAllGather));
  EXPECT_EQ(ring, (stage == 2 ? micro + 1 : 2) * (n - 1) * psi_bytes / n);
  if (sharded) {
    // Every rank holds the same updated parameters again.
    std::vector<float> mine(model.params().flat_values().data<float>(),
                            model.params().flat_values().data<float>() + model.params().numel());
    Tensor first = model.params().flat_values().clone(MemoryCategory::kOther);
    dp->broadcast(first, 0).wait();
    EXPECT_EQ(mine, std::vector<float>(first.data<float>(), first.data<float>() + first.numel()));
  }
}

// ZeRO 0 with the word embedding reduced by rows: its buckets leave at the first readiness
// report (after the output layer's backward), the rows its tokens touched are summed over DP at
// the end, and the result is the single process's gradient up to the order of the sums.
void check_embedding_rows(bool tied) {
  auto world = ProcessGroup::world();
  comm::ParallelState mesh(world, comm::MeshLayout(world->size(), {}));
  auto dp = mesh.group(comm::GroupKind::kData);
  const int n = dp->size(), d = dp->rank();
  const model::ModelConfig cfg = testing::small_model_config(tied);
  const int64_t micro = 2, global = micro * n;
  const float scale = 1.0f / (global * cfg.seq_length);

  model::GPTModel ref(cfg, DType::kF32, 11);
  ref.params().zero_grads();
  for (int64_t s = 0; s < global; ++s) testing::small_model_micro_batch(ref, s, 1, scale);

  model::GPTModel model(cfg, DType::kF32, 11, {}, n);
  model::ChunkRunner runner(model);
  const auto [wte_begin, wte_end] = model.word_embedding_range();
  ASSERT_GT(wte_end, wte_begin);
  DataParallelGrads grads(model.params(), dp, ShardingPlan::for_stage(0, 65536, true), {}, nullptr,
                          {}, {{wte_begin, wte_end}, cfg.hidden_size, cfg.seq_length});
  model::EmbeddingRowGrads* rows = grads.embedding_rows();
  ASSERT_NE(rows, nullptr);
  // Not at ZeRO 1, nor without overlap: there the embedding is reduced whole, as before.
  for (const auto& plan :
       {ShardingPlan::for_stage(1, 65536, true), ShardingPlan::for_stage(0, 65536, false)})
    EXPECT_EQ(DataParallelGrads(model.params(), dp, plan, {}, nullptr, {},
                                {{wte_begin, wte_end}, cfg.hidden_size, cfg.seq_length})
                  .embedding_rows(),
              nullptr);
  // Nor where the rows' union could pass half the embedding's 64 rows (8 tokens a rank here).
  const ShardingPlan zero0 = ShardingPlan::for_stage(0, 65536, true);
  EXPECT_TRUE(embedding_by_rows(zero0, 4, {{0, 64 * 64}, 64, 8}));
  EXPECT_FALSE(embedding_by_rows(zero0, 4, {{0, 64 * 64}, 64, 9}));
  EXPECT_FALSE(embedding_by_rows(zero0, 1, {{0, 64 * 64}, 64, 8}));
  grads.start_iteration();
  testing::small_model_micro_batch(runner, d, 1, scale);  // accumulates only
  dp->reset_stats();
  int64_t issued_at_first_report = -1;
  runner.set_grads_ready_hook(
      [&](int64_t offset) {
        grads.grads_ready(offset);
        if (issued_at_first_report < 0)
          issued_at_first_report = dp->stats().issued_of(OpType::kAllReduce);
      },
      rows);
  testing::small_model_micro_batch(runner, n + d, 1, scale);
  runner.set_grads_ready_hook(nullptr);
  // At the first report (after the output layer) only the embedding's one bucket is final: the
  // output norm shares the last bucket (64 Ki elements) with the last layers. Reduced whole, the
  // embedding would leave last.
  EXPECT_EQ(issued_at_first_report, 1);
  // This rank's rows: the distinct tokens of its micro-batch (sample n + d of the stream).
  std::vector<int32_t> want_rows;
  for (int64_t i = 0; i < cfg.seq_length; ++i)
    want_rows.push_back(
        static_cast<int32_t>((7 * ((n + d) * cfg.seq_length + i) + 3) % cfg.vocab_size));
  std::sort(want_rows.begin(), want_rows.end());
  want_rows.erase(std::unique(want_rows.begin(), want_rows.end()), want_rows.end());
  EXPECT_TRUE(rows->filled);
  EXPECT_EQ(rows->rows, want_rows);
  grads.finish();
  EXPECT_FALSE(rows->armed);
  // Two small all-gathers (row counts, row indices) and one all-reduce of the rows' union.
  EXPECT_EQ(dp->stats().calls_of(OpType::kAllGather), 2);
  EXPECT_EQ(dp->stats().calls_of(OpType::kAllReduce), grads.num_buckets() + 1);

  const float* got = model.params().flat_grads().data<float>();
  const float* want = ref.params().flat_grads().data<float>();
  double max_err = 0, max_ref = 0;
  for (int64_t i = 0; i < ref.params().numel(); ++i) {
    max_err = std::max(max_err, std::fabs(double(got[i]) - want[i]));
    max_ref = std::max(max_ref, std::fabs(double(want[i])));
  }
  EXPECT_LE(max_err, 1e-5 * max_ref);
  EXPECT_GT(max_ref, 0.0);
}

// Gradients reduced in bf16 (ShardingPlan::grad_reduce_dtype; --grad-reduce-in-bf16): after one
// micro-batch per rank each owned element is the bf16 sum of the ranks' local gradients rounded to
// bf16 (two ranks: round(round(a) + round(b)) exactly; four: within one bf16 rounding per
// addition of the exact sum), half the bytes reach MPI, and the result is not the fp32 one.
void check_bf16_reduction(int stage) {
  auto world = ProcessGroup::world();
  comm::ParallelState mesh(world, comm::MeshLayout(world->size(), {}));
  auto dp = mesh.group(comm::GroupKind::kData);
  const int n = dp->size(), d = dp->rank();
  const model::ModelConfig cfg = testing::small_model_config();
  const float scale = 1.0f / (n * cfg.seq_length);
  // Every rank's local gradient, computed here alone.
  std::vector<std::vector<float>> local;
  for (int r = 0; r < n; ++r) {
    model::GPTModel ref(cfg, DType::kF32, 11);
    ref.params().zero_grads();
    testing::small_model_micro_batch(ref, r, 1, scale);
    const float* g = ref.params().flat_grads().data<float>();
    local.emplace_back(g, g + ref.params().numel());
  }
  model::GPTModel model(cfg, DType::kF32, 11, {}, n);
  model::ChunkRunner runner(model);
  ShardingPlan plan = ShardingPlan::for_stage(stage, 65536, true);
  plan.grad_reduce_dtype = DType::kBF16;
  DataParallelGrads grads(model.params(), dp, plan);
  grads.start_iteration();
  dp->reset_stats();
  runner.set_grads_ready_hook([&](int64_t offset) { grads.grads_ready(offset); });
  testing::small_model_micro_batch(runner, d, 1, scale);
  runner.set_grads_ready_hook(nullptr);
  grads.finish();
  const OpType reduction = stage >= 1 ? OpType::kReduceScatter : OpType::kAllReduce;
  EXPECT_EQ(dp->stats().sent_bytes_of(reduction), 2 * model.params().numel());

  const auto bf16_of = [](float x) { return to_f32(bf16(x)); };
  const float* got = model.params().flat_grads().data<float>();
  int64_t wrong = 0, checked = 0, unlike_fp32 = 0;
  for (const FlatRange& r : grads.owned())
    for (int64_t i = r.begin; i < std::min<int64_t>(r.end, local[0].size()); ++i, ++checked) {
      double exact = 0, magnitude = 0, fp32 = 0;
      for (int k = 0; k < n; ++k) {
        exact += bf16_of(local[k][i]);
        magnitude += std::fabs(bf16_of(local[k][i]));
        fp32 += local[k][i];
      }
      unlike_fp32 += got[i] != static_cast<float>(fp32);
      if (n == 2)
        wrong += got[i] != bf16_of(bf16_of(local[0][i]) + bf16_of(local[1][i]));
      else
        wrong += std::fabs(got[i] - exact) > 1.01 * (n - 1) * 0x1p-8 * magnitude ||
                 bf16_of(got[i]) != got[i];
    }
  EXPECT_GT(checked, 1000);
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(unlike_fp32, checked / 10);  // the reduction really ran in bf16
}

TEST(DataParallelGrads, AllReduceInBf16) { check_bf16_reduction(0); }
TEST(DataParallelGrads, ReduceScatterInBf16) { check_bf16_reduction(1); }

TEST(DataParallelGrads, TiedEmbeddingByRowsMatchesSingleProcess) { check_embedding_rows(true); }
TEST(DataParallelGrads, UntiedEmbeddingByRowsMatchesSingleProcess) { check_embedding_rows(false); }

TEST(DataParallelGrads, AllReduceMatchesSingleProcess) { check(0, true); }
TEST(DataParallelGrads, AllReduceWithoutOverlap) { check(0, false); }
TEST(DataParallelGrads, ShardedOptimizerMatchesSingleProcess) { check(1, true); }
TEST(DataParallelGrads, ShardedOptimizerWithoutOverlap) { check(1, false); }
TEST(DataParallelGrads, ShardedGradientsMatchSingleProcess) { check(2, true); }
TEST(DataParallelGrads, ShardedGradientsWithoutOverlap) { check(2, false); }

}  // namespace
}  // namespace tessera::distributed

int main(int argc, char** argv) { return tessera::testing::run_distributed_tests(argc, argv); }
