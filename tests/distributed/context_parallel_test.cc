// Context parallelism under MPI (context/, model/attention.h): the all-to-all exchange between
// the sequence split (each rank: chunks r and 2N-1-r of every sample) and the head split (each
// rank: whole sequences of 1/N of the heads) puts every element where the split arithmetic says
// and back, summing the key/value groups several ranks hold; and an attention layer under every
// communication type (p2p, all_gather, a2a, a2a+p2p at 4 ranks; GQA, RoPE, dropout, document
// masks) gives, on each rank's tokens, the single process's output and input gradient over the
// whole sequence, its parameter gradients summed over the ranks equal to the whole sequence's,
// while the bytes the runtime counted on the group equal the analytic table of
// docs/context_parallel.md, forward and backward.
// ranks: 2 4
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "dist_main.h"
#include "tessera/context/head_exchange.h"
#include "tessera/core/sequence_split.h"
#include "tessera/model/attention.h"

namespace tessera {
namespace {

// A value that names its element: sample b, global position t, column c.
float tag(int64_t b, int64_t t, int64_t c) { return static_cast<float>(b * 100000 + t * 100 + c); }

TEST(HeadExchange, PutsEveryElementWhereTheSplitSaysAndBack) {
  auto world = comm::ProcessGroup::world();
  const int N = world->size(), r = world->rank();
  const int NH = 4, KV = 2, HD = 3;  // KV groups split at N = 2, each held by N / KV ranks at 4
  const int64_t B = 2, T = 8 * N, T_local = T / N;
  const context::HeadColumns cols = context::qkv_columns(NH, KV, HD, N);
  const SequenceSplit split{N, r};
  Tensor x = Tensor::empty({B * T_local, cols.width}, DType::kF32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t u = 0; u < T_local; ++u)
      for (int64_t c = 0; c < cols.width; ++c)
        x.data<float>()[(b * T_local + u) * cols.width + c] = tag(b, split.global(u, T), c);
  const context::HeadExchange exchange(world);
  world->reset_stats();
  const Tensor heads = exchange.to_heads(x, B, cols);
  ASSERT_EQ(heads.dim(0), B * T);
  ASSERT_EQ(heads.dim(1), cols.heads_width);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      int64_t k = 0;
      for (const auto& [begin, end] : cols.ranges[r])
        for (int64_t c = begin; c < end; ++c, ++k)
          ASSERT_EQ(heads.data<float>()[(b * T + t) * cols.heads_width + k], tag(b, t, c))
              << "sample " << b << " position " << t << " column " << c;
    }
  const Tensor back = exchange.to_sequence(heads, B, cols);
  // Query columns come back once; a key/value group held by N / KV ranks comes back that often.
  const int64_t q_cols = int64_t{NH} * HD, copies = N > KV ? N / KV : 1;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = i % cols.width;
    ASSERT_EQ(back.data<float>()[i], x.data<float>()[i] * (c < q_cols ? 1 : copies)) << i;
  }
  // Two all-to-alls of N blocks of B * T_local rows of the head-split width, fp32; (N-1)/N of
  // each leaves the rank (comm::CommStats counts the buffers handed to MPI).
  const comm::CommStats stats = world->stats();
  EXPECT_EQ(stats.sent_bytes_of(comm::OpType::kAllToAll), 2 * B * T * cols.heads_width * 4);
  EXPECT_EQ(stats.calls_of(comm::OpType::kAllToAll), 2);
}

Tensor normal(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor t = Tensor::empty({rows, cols}, DType::kF32);
  for (int64_t i = 0; i < rows * cols; ++i) t.data<float>()[i] = nd(gen);
  return t;
}

// Rows of `full` (B samples of T) at rank r's positions: its part of the sequence split.
Tensor local_rows(const Tensor& full, int64_t B, SequenceSplit split) {
  const int64_t T = full.dim(0) / B, T_local = split.local(T), C = full.dim(1);
  Tensor out = Tensor::empty({B * T_local, C}, DType::kF32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t u = 0; u < T_local; ++u)
      out.slice_rows(b * T_local + u, b * T_local + u + 1)
          .copy_from(full.slice_rows(b * T + split.global(u, T), b * T + split.global(u, T) + 1));
  return out;
}

// The layer under CP sums attention over blocks (merged by log-sum-exp) or in another head
// order than the single process: rounding-level differences, 2e-5 of the scale.
void expect_close(const float* u, const float* v, int64_t n, const std::string& what) {
  testing::expect_close_to_scale(u, v, n, what, 2e-5);
}

// Bytes handed to MPI per rank by an attention layer's forward and by its backward
// (docs/context_parallel.md's table), fp32: K the rank's key/value block (D, its dK/dV, the
// same size), S = B * T. {-1, -1} for a2a+p2p, whose traffic is on two subgroups.
std::pair<int64_t, int64_t> analytic_bytes(context::CommType type, int N, int64_t rows_local,
                                           int NH, int KV, int HD) {
  const int64_t K = rows_local * 2 * KV * HD * 4, S = rows_local * N;
  switch (type) {
    case context::CommType::kP2P:
      return {(N - 1) * K, (N - 1) * K + N * K};
    case context::CommType::kAllGather:
      return {K, K + N * K};
    case context::CommType::kA2A: {
      const int64_t w_qkv = (NH / N + 2 * (KV % N == 0 ? KV / N : 1)) * HD, w_out = NH / N * HD;
      return {S * (w_qkv + w_out) * 4, S * (w_qkv + w_out) * 4};
    }
    case context::CommType::kA2AP2P:
      break;
  }
  return {-1, -1};
}

void attention_matches_whole_sequence(context::CommType type, bool documents) {
  auto world = comm::ProcessGroup::world();
  const int N = world->size(), r = world->rank();
  if (type == context::CommType::kA2AP2P && N < 4) GTEST_SKIP() << "a2a+p2p 2 x 2 needs 4 ranks";
  model::ModelConfig cfg = model::preset("llama-tiny");  // 4 heads, 2 key/value groups, RoPE
  cfg.attention_dropout = 0.2f;
  const int64_t B = 2, T = 16 * N, C = cfg.hidden_size;
  const SequenceSplit split{N, r};
  const parallel::TensorParallel tp;
  const context::ContextParallel cp(
      world, {type},
      type == context::CommType::kA2AP2P ? std::vector<int>{2, N / 2} : std::vector<int>{});
  model::ParameterSet whole, mine;
  for (model::ParameterSet* ps : {&whole, &mine}) {
    model::Attention::declare(*ps, "attn", cfg);
    ps->allocate(DType::kF32, 3);
  }
  const model::Attention one(whole, "attn", cfg, 0, &tp);
  const model::Attention split_attention(mine, "attn", cfg, 0, &tp, &cp);

  // Documents: a new one starts every 5 tokens (per sample offset), positions restart with it.
  std::vector<int32_t> doc(B * T), pos(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t start = t < 3 + b ? 0 : (t - 3 - b) / 5 * 5 + 3 + b;
      doc[b * T + t] = static_cast<int32_t>(start);
      pos[b * T + t] = static_cast<int32_t>(t - start);
    }
  std::vector<int32_t> doc_local(B * split.local(T)), pos_local(doc_local.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t u = 0; u < split.local(T); ++u) {
      doc_local[b * split.local(T) + u] = doc[b * T + split.global(u, T)];
      pos_local[b * split.local(T) + u] = pos[b * T + split.global(u, T)];
    }
  model::StepContext ref = model::StepContext::make(B, T, 7, 11, 3, true);
  model::StepContext ctx = model::StepContext::make(B, split.local(T), 7, 11, 3, true, 0, 0, split);
  if (documents) {
    ref.doc_start = doc.data();
    ref.sample_positions = pos.data();
    ctx.doc_start = doc_local.data();
    ctx.doc_start_global = doc.data();
    ctx.sample_positions = pos_local.data();
  }
  const Tensor x = normal(B * T, C, 21), dy = normal(B * T, C, 22);
  model::Attention::Saved sa, sb;
  const Tensor ya = one.forward(x, sa, ref);
  const Tensor da = one.backward(dy, sa, ref);
  world->reset_stats();
  const Tensor yb = split_attention.forward(local_rows(x, B, split), sb, ctx);
  const int64_t forward_bytes = world->stats().total_sent_bytes();
  world->reset_stats();
  const Tensor db = split_attention.backward(local_rows(dy, B, split), sb, ctx);
  const int64_t backward_bytes = world->stats().total_sent_bytes();
  const int64_t n_local = B * split.local(T) * C;
  expect_close(local_rows(ya, B, split).data<float>(), yb.data<float>(), n_local, "output");
  expect_close(local_rows(da, B, split).data<float>(), db.data<float>(), n_local, "input gradient");
  Tensor sum = mine.flat_grads().clone(MemoryCategory::kOther);
  world->all_reduce(sum, comm::ReduceOp::kSum).wait();
  for (const model::Parameter& p : whole.all())
    expect_close(p.grad.data<float>(), sum.data<float>() + mine.get(p.name).offset, p.numel(),
                 p.name);
  const auto [forward, backward] = analytic_bytes(
      type, N, B * split.local(T), cfg.num_attention_heads, cfg.kv_heads(), cfg.head_dim());
  if (forward >= 0) {
    EXPECT_EQ(forward_bytes, forward) << context::comm_type_name(type) << " forward";
    EXPECT_EQ(backward_bytes, backward) << context::comm_type_name(type) << " backward";
  }
}

class ContextParallelAttention
    : public ::testing::TestWithParam<std::tuple<context::CommType, bool>> {};

TEST_P(ContextParallelAttention, MatchesTheWholeSequence) {
  attention_matches_whole_sequence(std::get<0>(GetParam()), std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    EveryType, ContextParallelAttention,
    ::testing::Combine(::testing::Values(context::CommType::kP2P, context::CommType::kAllGather,
                                         context::CommType::kA2A, context::CommType::kA2AP2P),
                       ::testing::Bool()),
    [](const auto& info) {
      std::string name = context::comm_type_name(std::get<0>(info.param));
      for (char& ch : name)
        if (ch == '+') ch = '_';
      return name + (std::get<1>(info.param) ? "_documents" : "");
    });

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::testing::run_distributed_tests(argc, argv); }
