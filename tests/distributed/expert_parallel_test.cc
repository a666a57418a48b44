// Expert parallelism under MPI: an MoE block whose experts are split over the EP group (each rank
// routing its own tokens, model/moe_layer.h with moe/token_dispatcher.h) against the same block
// with every expert on one rank, run by each rank over the same rank's tokens: outputs, input
// gradients, the router's gradient and each expert's gradient (summed over the EP ranks, whose
// tokens each expert served) agree; the all-to-all-v bytes the runtime counted equal the
// analytic count for the routing that happened (rows sent to every peer, own block included,
// forward and backward, out and back).
// ranks: 2 4
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "dist_main.h"
#include "tessera/model/moe_layer.h"
#include "tessera/moe/token_dispatcher.h"

namespace tessera::model {
namespace {

ModelConfig config(bool capacity, bool shared) {
  ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.swiglu = true;
  c.add_bias_linear = false;
  c.init_method_std = 0.3f;
  c.moe.num_experts = 8;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 12;
  c.moe.aux_loss_coeff = 0.05f;
  c.moe.z_loss_coeff = 0.01f;
  c.moe.shared_expert_size = shared ? 8 : 0;
  c.moe.capacity_factor = capacity ? 0.75f : 0.0f;
  return c;
}

Tensor rows(int64_t N, int64_t C, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor t = Tensor::empty({N, C}, DType::kF32);
  for (int64_t i = 0; i < N * C; ++i) t.data<float>()[i] = nd(gen);
  return t;
}

void check_against_one_rank(const ModelConfig& cfg) {
  auto world = comm::ProcessGroup::world();
  const int P = world->size(), r = world->rank();
  const int64_t B = 2, T = 6 + r, N = B * T, C = cfg.hidden_size;  // uneven token counts
  const parallel::TensorParallel tp;
  // Every expert here, and this rank's share of them with the EP group the world.
  ParameterSet whole, part;
  MoeLayer::declare(whole, "layer", cfg);
  whole.allocate(DType::kF32, 5);
  MoeLayer::declare(part, "layer", cfg, false);
  MoeLayer::declare_experts(part, "layer", cfg, P, r);
  part.allocate(DType::kF32, 5);
  const MoeLayer one(whole, "layer", cfg, &tp);
  const MoeLayer split(part, "layer", cfg, &tp, world.get());

  const Tensor x = rows(N, C, 100 + r), dy = rows(N, C, 200 + r);
  StepContext ctx = StepContext::make(B, T, 0, 1, 1, true);
  ctx.moe_aux_loss_scale = 0.5;
  MoeLayer::Saved a, b;
  world->reset_stats();
  const Tensor ya = one.forward(x, a, ctx), yb = split.forward(x, b, ctx);
  const Tensor da = one.backward(dy, a, ctx), db = split.backward(dy, b, ctx);
  const comm::CommStats stats = world->stats();

  auto expect_close = [](const float* u, const float* v, int64_t n, const char* what) {
    testing::expect_close_to_scale(u, v, n, what, 1e-5);
  };
  expect_close(ya.data<float>(), yb.data<float>(), N * C, "output");
  expect_close(da.data<float>(), db.data<float>(), N * C, "input gradient");
  // Replicated parameters (router, shared expert): this rank's tokens' gradient, both ways.
  for (const Parameter& p : part.all()) {
    if (p.name.find(".experts.") != std::string::npos) continue;
    expect_close(whole.get(p.name).grad.data<float>(), p.grad.data<float>(), p.numel(),
                 p.name.c_str());
  }
  // An expert's gradient: on its owner, the sum of what every rank's tokens gave it; on the
  // one-rank block, each rank's own share, summed here over the world.
  Tensor sum = whole.flat_grads().clone(MemoryCategory::kOther);
  world->all_reduce(sum, comm::ReduceOp::kSum).wait();
  for (const Parameter& p : part.all()) {
    if (p.name.find(".experts.") == std::string::npos) continue;
    const Parameter& w = whole.get(p.name);
    expect_close(sum.data<float>() + w.offset, p.grad.data<float>(), p.numel(), p.name.c_str());
  }

  // The all-to-all-v volume: this rank sends each kept (token, expert) row once to its expert's
  // rank (own block included) and gets it back, forward and again backward, fp32.
  const int64_t sent_rows = N * cfg.moe.topk - b.perm.dropped;
  EXPECT_EQ(moe::dispatch_elements(b.plan, C), sent_rows * C);
  int64_t served_rows = 0;
  for (int64_t q : b.plan.recv_rows) served_rows += q;
  const int64_t f32 = static_cast<int64_t>(sizeof(float));
  EXPECT_EQ(stats.sent_bytes_of(comm::OpType::kAllToAllv), 2 * (sent_rows + served_rows) * C * f32);
  EXPECT_EQ(stats.received_bytes_of(comm::OpType::kAllToAllv),
            2 * (sent_rows + served_rows) * C * f32);
  // Every row sent is served somewhere.
  Tensor totals = Tensor::empty({2}, DType::kI64);
  totals.data<int64_t>()[0] = sent_rows;
  totals.data<int64_t>()[1] = served_rows;
  world->all_reduce(totals, comm::ReduceOp::kSum).wait();
  EXPECT_EQ(totals.data<int64_t>()[0], totals.data<int64_t>()[1]);
  // The counts exchange: one all-gather of E int64 per forward.
  EXPECT_EQ(stats.sent_bytes_of(comm::OpType::kAllGather), cfg.moe.num_experts * 8);
}

TEST(ExpertParallel, DroplessMatchesOneRank) { check_against_one_rank(config(false, false)); }

TEST(ExpertParallel, CapacityAndSharedExpertMatchOneRank) {
  check_against_one_rank(config(true, true));
}

// The all-gather dispatcher computes the same rows in the same order: the same bits as the
// all-to-all one, forward and backward.
TEST(ExpertParallel, AllGatherDispatcherGivesTheAllToAllBits) {
  auto world = comm::ProcessGroup::world();
  const int P = world->size(), r = world->rank();
  ModelConfig a2a = config(true, false), ag = a2a;
  ag.moe.dispatcher = moe::DispatcherType::kAllGather;
  const int64_t B = 2, T = 5 + 2 * r, N = B * T, C = a2a.hidden_size;
  const parallel::TensorParallel tp;
  ParameterSet pa, pb;
  for (ParameterSet* ps : {&pa, &pb}) {
    MoeLayer::declare(*ps, "layer", a2a, false);
    MoeLayer::declare_experts(*ps, "layer", a2a, P, r);
    ps->allocate(DType::kF32, 9);
  }
  const MoeLayer la(pa, "layer", a2a, &tp, world.get()), lb(pb, "layer", ag, &tp, world.get());
  const Tensor x = rows(N, C, 300 + r), dy = rows(N, C, 400 + r);
  StepContext ctx = StepContext::make(B, T, 0, 1, 1, true);
  ctx.moe_aux_loss_scale = 1.0;
  MoeLayer::Saved sa, sb;
  const Tensor ya = la.forward(x, sa, ctx), yb = lb.forward(x, sb, ctx);
  const Tensor da = la.backward(dy, sa, ctx), db = lb.backward(dy, sb, ctx);
  for (int64_t i = 0; i < N * C; ++i) {
    ASSERT_EQ(ya.data<float>()[i], yb.data<float>()[i]) << i;
    ASSERT_EQ(da.data<float>()[i], db.data<float>()[i]) << i;
  }
  for (int64_t i = 0; i < pa.numel(); ++i)
    ASSERT_EQ(pa.flat_grads().data<float>()[i], pb.flat_grads().data<float>()[i]) << i;
}

}  // namespace
}  // namespace tessera::model

int main(int argc, char** argv) { return tessera::testing::run_distributed_tests(argc, argv); }
