// The step-time model (plan/step_time.h) on a machine whose rates make its arithmetic checkable
// by hand: GEMMs and attention at 1 TFLOP/s (attention's backward at half, so a causal layer's
// three passes cost Megatron's 3x forward), every other kernel free. Then the compute of a step is
// Megatron's model FLOPs (train/flops.h, written independently) over 1e12; collectives add their
// ring cost; recomputation its forward; ZeRO its reduce-scatter and gather.
#include "tessera/plan/step_time.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/train/flops.h"
#include "tessera/train/rank_layout.h"
#include "testing/parse_flags.h"

namespace tessera::plan {
namespace {

constexpr double kGemm = 1e12, kFree = 1e30;
const LinkRate kLink{2e-6, 1e10};

MachineDescription hand_machine() {
  MachineDescription m;
  m.name = "by hand";
  m.kind = "description";
  m.hosts = 1;
  for (int ranks : {1, 2, 4}) {
    HostConfiguration c;
    c.ranks_per_host = ranks;
    for (DType d : {DType::kF32, DType::kBF16}) {
      auto& k = c.kernels[d];
      for (int i = 0; i < kKernelKinds; ++i) k[i].points = {{1, kFree}};
      for (KernelKind g : {KernelKind::kGemmForward, KernelKind::kGemmInputGrad,
                           KernelKind::kGemmWeightGrad, KernelKind::kAttentionForward})
        k[static_cast<int>(g)].points = {{1, kGemm}};
      k[static_cast<int>(KernelKind::kAttentionBackward)].points = {{1, kGemm / 2}};
    }
    c.intra_host.fill(kLink);
    m.configurations.push_back(c);
  }
  return m;
}

struct Planned {
  train::TrainArgs args;
  comm::MeshLayout mesh;
  std::vector<train::RankLayout> ranks;
};

Planned planned(int world, std::vector<std::string> flags) {
  for (const char* f : {"--mock-data", "--lr", "1e-3", "--train-iters", "1", "--model", "gpt2-tiny",
                        "--hidden-size", "128", "--num-attention-heads", "4", "--num-layers", "4",
                        "--global-batch-size", "8", "--hidden-dropout", "0"})
    flags.push_back(f);
  train::TrainArgs args = testing::parse_flags(flags);
  comm::MeshLayout mesh = train::prepare_layout(args, world);
  std::vector<train::RankLayout> ranks = train::rank_layouts(args, mesh, 1);
  return {args, mesh, ranks};
}

StepTimePrediction predict(const Planned& p) {
  return predict_step_time(p.args.model, p.mesh, p.ranks, hand_machine());
}

double flops(const Planned& p, int tp) {
  return train::model_flops(p.args.model, p.args.model.padded_vocab_size(tp),
                            p.args.global_batch_size);
}

TEST(StepTime, ComputeIsModelFlopsAtTheGemmRate) {
  const Planned p = planned(1, {"--micro-batch-size", "2"});
  const StepTimePrediction t = predict(p);
  EXPECT_NEAR(t.components.compute, flops(p, 1) / kGemm, 1e-9 * t.step_s);
  EXPECT_EQ(t.components.tp_comm, 0);
  EXPECT_EQ(t.components.dp_comm, 0);
  EXPECT_EQ(t.components.pipeline_bubble, 0);
  EXPECT_NEAR(t.step_s, t.components.total(), 1e-15);
}

TEST(StepTime, TensorParallelHalvesComputeAndPaysItsAllReducesByHand) {
  const Planned p = planned(2, {"--micro-batch-size", "2", "--tensor-model-parallel-size", "2"});
  const StepTimePrediction t = predict(p);
  EXPECT_NEAR(t.components.compute, flops(p, 2) / 2 / kGemm, 1e-9 * t.step_s);
  // Per micro-batch of N = 2 x 64 tokens: two all-reduces of N x C fp32 values a layer in
  // forward and two in backward, one after the embedding, one for the head's input gradient, and
  // the loss's three of N fp32 values; 4 micro-batches.
  const double N = 2 * 64, C = 128, M = 4;
  const double rows = kLink.seconds(CollectiveKind::kAllReduce, 4 * N * C, 2);
  const double loss = kLink.seconds(CollectiveKind::kAllReduce, 4 * N, 2);
  EXPECT_NEAR(t.components.tp_comm, M * ((4 * 4 + 2) * rows + 3 * loss), 1e-12);
  // Sequence parallelism turns each all-reduce into a reduce-scatter and adds the gathers.
  const Planned sp = planned(
      2, {"--micro-batch-size", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"});
  const StepTimePrediction s = predict(sp);
  const double scatter = kLink.seconds(CollectiveKind::kReduceScatter, 4 * N * C, 2);
  const double gather = kLink.seconds(CollectiveKind::kAllGather, 4 * N * C, 2);
  // A layer: 2 gathers and 2 scatters forward, 2 and 2 backward, and 2 gathers again in backward
  // (the QKV and MLP-up projections keep only their rows of the input); the embedding 1 scatter
  // forward and 1 gather backward; the head 1 gather and 1 scatter (and the loss's three).
  EXPECT_NEAR(s.components.tp_comm,
              M * ((4 * 4 + 2) * scatter + (4 * 4 + 2 + 2 * 4) * gather + 3 * loss), 1e-12);
}

TEST(StepTime, ProductsAreTheComputeAGemmFreeMachineDoesNotPay) {
  // compute_gemm is the part of compute priced by the gemm_* kinds: the same layout on a machine
  // whose products are free pays the rest alone, and no products.
  MachineDescription gemm_free = hand_machine();
  for (HostConfiguration& c : gemm_free.configurations)
    for (auto& [dtype, curves] : c.kernels)
      for (KernelKind g :
           {KernelKind::kGemmForward, KernelKind::kGemmInputGrad, KernelKind::kGemmWeightGrad})
        curves[static_cast<int>(g)].points = {{1, kFree}};
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--micro-batch-size", "2"},
        {"--micro-batch-size", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel",
         "--recompute-granularity", "full", "--recompute-method", "uniform",
         "--recompute-num-layers", "1"}}) {
    const Planned p = planned(2, flags);
    const StepTimePrediction t = predict(p);
    const StepTimePrediction rest = predict_step_time(p.args.model, p.mesh, p.ranks, gemm_free);
    EXPECT_GT(t.components.compute_gemm, 0.5 * t.components.compute);
    EXPECT_NEAR(t.components.compute_gemm, t.components.compute - rest.components.compute,
                1e-9 * t.step_s);
    EXPECT_LT(rest.components.compute_gemm, 1e-9 * t.step_s);
  }
}

TEST(StepTime, AttentionDropoutPaysItsMaskInEachPassOrNothingWhereLeftOut) {
  // gpt2-tiny keeps Megatron's --attention-dropout 0.1: each layer's core draws the mask over its
  // causal scores, B x heads x T^2 / 2 = 2 x 4 x 64 x 64 / 2 a micro-batch, in forward and again in
  // backward; 4 layers, 4 micro-batches.
  const Planned p = planned(1, {"--micro-batch-size", "2"});
  const double base = predict(p).components.compute;
  constexpr double kRate = 1e9;
  MachineDescription m = hand_machine();
  for (HostConfiguration& c : m.configurations)
    for (auto& [dtype, curves] : c.kernels)
      curves[static_cast<int>(KernelKind::kAttentionDropout)].points = {{1, kRate}};
  const double scores = 2 * 4 * 64 * 64 / 2.0;
  EXPECT_NEAR(predict_step_time(p.args.model, p.mesh, p.ranks, m).components.compute - base,
              2 * 4 * 4 * scores / kRate, 1e-12);
  // Without the dropout nothing is added; a description without the curve prices it at 0.
  const Planned off = planned(1, {"--micro-batch-size", "2", "--attention-dropout", "0"});
  EXPECT_NEAR(predict_step_time(off.args.model, off.mesh, off.ranks, m).components.compute, base,
              1e-12);
  for (HostConfiguration& c : m.configurations)
    for (auto& [dtype, curves] : c.kernels)
      curves[static_cast<int>(KernelKind::kAttentionDropout)].points.clear();
  EXPECT_NEAR(predict_step_time(p.args.model, p.mesh, p.ranks, m).components.compute, base, 1e-12);
}

TEST(StepTime, FullRecomputationAddsTheLayersForward) {
  const Planned base = planned(1, {"--micro-batch-size", "2"});
  const Planned full = planned(1, {"--micro-batch-size", "2", "--recompute-granularity", "full",
                                   "--recompute-method", "uniform", "--recompute-num-layers", "1"});
  // Megatron's count is 3x forward; the head's forward (2 V C FLOPs a token) is not rerun.
  const double tokens = 8 * 64, V = base.args.model.padded_vocab_size(1);
  const double layers_forward = flops(base, 1) / 3 - 2 * tokens * V * 128;
  EXPECT_NEAR(predict(full).components.compute - predict(base).components.compute,
              layers_forward / kGemm, 1e-9 * predict(full).step_s);
}

TEST(StepTime, DataParallelReductionByHand) {
  for (int stage : {0, 1}) {
    const Planned p =
        planned(2, {"--micro-batch-size", "2", "--zero-stage", std::to_string(stage)});
    const StepTimePrediction t = predict(p);
    EXPECT_NEAR(t.components.compute, flops(p, 1) / 2 / kGemm, 1e-9 * t.step_s);
    // One bucket (the model is far below 40M elements), ready when backward ends: all of it
    // waits. ZeRO 1 reduce-scatters, then gathers the updated fp32 values.
    // The parameters with the embedding's rows padded (257 -> 384), as the trainer allocates.
    const model::ModelConfig& c = p.args.model;
    const double P = static_cast<double>(c.num_parameters()) +
                     static_cast<double>(c.padded_vocab_size(1) - c.vocab_size) * c.hidden_size;
    const double expected = stage == 0 ? kLink.seconds(CollectiveKind::kAllReduce, 4 * P, 2)
                                       : kLink.seconds(CollectiveKind::kReduceScatter, 4 * P, 2) +
                                             kLink.seconds(CollectiveKind::kAllGather, 4 * P, 2);
    EXPECT_NEAR(t.components.dp_comm, expected, 1e-3 * expected) << "ZeRO " << stage;
    // --grad-reduce-in-bf16: the reduction moves 2 bytes an element (the conversions run at the
    // free element-wise rate here); the gathered values stay fp32.
    const Planned bf16 = planned(2, {"--micro-batch-size", "2", "--zero-stage",
                                     std::to_string(stage), "--grad-reduce-in-bf16"});
    const double halved = stage == 0 ? kLink.seconds(CollectiveKind::kAllReduce, 2 * P, 2)
                                     : kLink.seconds(CollectiveKind::kReduceScatter, 2 * P, 2) +
                                           kLink.seconds(CollectiveKind::kAllGather, 4 * P, 2);
    EXPECT_NEAR(predict(bf16).components.dp_comm, halved, 1e-3 * halved) << "ZeRO " << stage;
  }
}

// ZeRO 0 overlapped reduces the word embedding by rows (distributed/data_parallel_grads.h) where
// the rows' union is at most half the embedding: its flat part leaves at backward's start (hidden:
// the overlap share is 1), and after backward come two all-gathers (each rank's count of rows,
// then their indices, padded to a micro-batch's tokens) and the all-reduce of the union of the
// rows, at most a micro-batch's tokens from each DP rank. Micro-batches of 64 tokens: at most
// 128 of the 384 rows (by rows); of 128 tokens: 256 (whole, as DataParallelReductionByHand).
TEST(StepTime, WordEmbeddingByRowsByHand) {
  const Planned p = planned(2, {"--micro-batch-size", "1"});
  const model::ModelConfig& c = p.args.model;
  const double P = train::theoretical_model_states(c, p.ranks[0]).parameter_elements;
  const double vocab = static_cast<double>(c.padded_vocab_size(1));
  ASSERT_EQ(vocab, 384);
  const double E = vocab * c.hidden_size, tokens = 64, rows = 2 * tokens;
  const double tail = kLink.seconds(CollectiveKind::kAllGather, 8 * 2, 2) +
                      kLink.seconds(CollectiveKind::kAllGather, 4 * tokens * 2, 2) +
                      kLink.seconds(CollectiveKind::kAllReduce, 4 * rows * c.hidden_size, 2);
  // One bucket besides the embedding's, ready when backward ends.
  EXPECT_NEAR(predict(p).components.dp_comm,
              kLink.seconds(CollectiveKind::kAllReduce, 4 * (P - E), 2) + tail, 1e-12);
  const Planned wide = planned(2, {"--micro-batch-size", "2"});
  EXPECT_NEAR(predict(wide).components.dp_comm, kLink.seconds(CollectiveKind::kAllReduce, 4 * P, 2),
              1e-12);
}

TEST(StepTime, PipelineBubbleOfEqualStages) {
  // 1F1B on 2 stages with 4 micro-batches of nearly equal stages (with a 128-row vocabulary the
  // head is small beside 2 layers of width 128): the bubble is about (P - 1) / (M + P - 1) of
  // the step.
  const Planned p = planned(
      2, {"--micro-batch-size", "2", "--pipeline-model-parallel-size", "2", "--vocab-size", "64"});
  const StepTimePrediction t = predict(p);
  const double fraction = t.components.pipeline_bubble / t.step_s;
  EXPECT_NEAR(fraction, 1.0 / 5, 0.2 / 5) << t.components.pipeline_bubble << " of " << t.step_s;
  EXPECT_NEAR(t.components.compute, flops(p, 1) / 2 / kGemm, 0.1 * t.components.compute);
}

// Context parallelism by hand (gpt2-tiny: S 64, C 128, 4 heads of 32; micro-batches of 2 on CP 2:
// 32 tokens a rank, 4 micro-batches of 4 layers): each rank computes half of everything, so the
// compute is half the model FLOPs at the rate; the exchanges are docs/context_parallel.md's bytes.
TEST(StepTime, ContextParallelHalvesComputeAndPaysItsExchangesByHand) {
  const auto cp = [](const char* type) {
    return planned(
        2, {"--micro-batch-size", "2", "--context-parallel-size", "2", "--cp-comm-type", type});
  };
  const double B = 2, T = 32, C = 128, e = 4, M = 4, L = 4;
  const double K = B * T * 2 * C * e, D = B * T * 2 * C * 4;  // a rank's k/v block, its dK/dV
  // Attention: 1/2 of 2 B S^2 C forward FLOPs a layer, backward at half the rate.
  const double attention_fwd = 2 * B * 64 * 64 * C / 2 / kGemm, attention_bwd = 2 * attention_fwd;
  const double message = kLink.seconds(CollectiveKind::kSendRecv, K, 2);
  const double dkv = kLink.seconds(CollectiveKind::kSendRecv, D, 2);
  {
    // p2p: one block forward, one block and two dK/dV backward; the blocks' transfers behind
    // the attention kernels (the hand machine's overlap is 1: hidden up to the kernels' time),
    // the dK/dV ones waited for.
    const Planned p = cp("p2p");
    const StepTimePrediction t = predict(p);
    EXPECT_NEAR(t.components.compute, flops(p, 1) / 2 / kGemm, 1e-9 * t.step_s);
    const double layer = (message - attention_fwd) + (message + 2 * dkv - attention_bwd);
    EXPECT_NEAR(t.components.tp_comm, M * L * layer, 1e-12);
  }
  {
    // all_gather: the k/v blocks gathered forward and again backward, dK/dV reduce-scattered.
    const StepTimePrediction t = predict(cp("all_gather"));
    const double layer = 2 * kLink.seconds(CollectiveKind::kAllGather, 2 * K, 2) +
                         kLink.seconds(CollectiveKind::kReduceScatter, 2 * D, 2);
    EXPECT_NEAR(t.components.tp_comm, M * L * layer, 1e-12);
  }
  {
    // a2a: q, k, v of the whole sequence and half the heads in, the output out (their
    // gradients backward); a rank sends half of each buffer.
    const Planned p = cp("a2a");
    const StepTimePrediction t = predict(p);
    EXPECT_NEAR(t.components.compute, flops(p, 1) / 2 / kGemm, 1e-9 * t.step_s);
    const double qkv = B * 64 * (3 * C / 2) * e, out = B * 64 * (C / 2) * e;
    const double layer = 2 * (kLink.seconds(CollectiveKind::kAllGather, qkv, 2) +
                              kLink.seconds(CollectiveKind::kAllGather, out, 2));
    EXPECT_NEAR(t.components.tp_comm, M * L * layer, 1e-12);
  }
  {
    // Selective recomputation reruns the core with its exchange: one more block a layer, less
    // what the rerun forward's blocks hide.
    const Planned p = planned(2, {"--micro-batch-size", "2", "--context-parallel-size", "2",
                                  "--recompute-granularity", "selective"});
    const double base = predict(cp("p2p")).components.tp_comm;
    EXPECT_NEAR(predict(p).components.tp_comm - base, M * L * (message - attention_fwd), 1e-12);
    // Under a2a it reruns on the head-split q/k/v it saved: only the output's all-to-all again.
    const Planned a2a =
        planned(2, {"--micro-batch-size", "2", "--context-parallel-size", "2", "--cp-comm-type",
                    "a2a", "--recompute-granularity", "selective"});
    const double out = B * 64 * (C / 2) * e;
    EXPECT_NEAR(predict(a2a).components.tp_comm - predict(cp("a2a")).components.tp_comm,
                M * L * kLink.seconds(CollectiveKind::kAllGather, out, 2), 1e-12);
  }
}

// An MoE model (mixtral-tiny: every layer 8 SwiGLU experts, top-2; dropless routing priced
// balanced): the compute is Megatron's active FLOPs (router, k experts, train/flops.h) at the rate.
Planned planned_moe(int world, std::vector<std::string> flags) {
  for (const char* f :
       {"--mock-data", "--lr", "1e-3", "--train-iters", "1", "--model", "mixtral-tiny",
        "--global-batch-size", "8", "--micro-batch-size", "2", "--hidden-dropout", "0"})
    flags.push_back(f);
  train::TrainArgs args = testing::parse_flags(flags);
  comm::MeshLayout mesh = train::prepare_layout(args, world);
  return {args, mesh, train::rank_layouts(args, mesh, 1)};
}

TEST(StepTime, MoeComputeIsActiveFlopsAndExpertParallelismPaysItsExchangesByHand) {
  const Planned one = planned_moe(1, {});
  const model::ModelConfig& c = one.args.model;
  ASSERT_TRUE(c.moe.enabled());
  const StepTimePrediction t1 = predict(one);
  EXPECT_NEAR(t1.components.compute, flops(one, 1) / kGemm, 1e-9 * t1.step_s);
  EXPECT_EQ(t1.components.tp_comm, 0);

  // EP 2 on 2 ranks (DP 2, expert DP 1): each rank half the tokens and half the experts. A layer's
  // micro-batch sends its N k rows (fp32) to the experts' rank and back, forward and backward
  // (an all-to-all: half of each buffer leaves), after an all-gather of the E counts.
  const Planned ep = planned_moe(2, {"--expert-model-parallel-size", "2"});
  const StepTimePrediction t2 = predict(ep);
  EXPECT_NEAR(t2.components.compute, flops(ep, 1) / 2 / kGemm, 1e-9 * t2.step_s);
  const double N = 2.0 * c.seq_length, C = c.hidden_size, E = c.moe.num_experts;
  const double L = c.num_layers, M = 2;  // micro-batches a rank: 8 / (2 x 2)
  const double rows = kLink.seconds(CollectiveKind::kAllGather, N * c.moe.topk * C * 4, 2);
  const double counts = kLink.seconds(CollectiveKind::kAllGather, 2 * E * 8, 2);
  EXPECT_NEAR(t2.components.tp_comm, M * L * (counts + 4 * rows), 1e-12);

  // The experts' gradients are reduced over the expert-DP group (one rank here), the rest over
  // DP: against DP 2 without EP, where every expert is reduced too, the all-reduce (one bucket,
  // 2 ranks: a latency plus the bytes at the bus rate) is short by every expert's fp32 gradient.
  const Planned dp = planned_moe(2, {});
  const double experts = L * E * 3 * C * c.moe_ffn();
  EXPECT_NEAR(predict(dp).components.dp_comm - t2.components.dp_comm,
              4 * experts / kLink.bus_bytes_per_s, 1e-6 * predict(dp).components.dp_comm);
}

TEST(StepTime, WhatItDoesNotCoverIsOneError) {
  // Parameter offload with experts in units of their own: an error, not a failed check.
  const Planned moe = planned_moe(2, {"--expert-model-parallel-size", "2", "--zero-stage", "3",
                                      "--offload-param-nvme-path", "/tmp"});
  EXPECT_THROW(predict(moe), Error);
  MachineDescription m = hand_machine();
  m.configurations[0]
      .kernels[DType::kF32][static_cast<int>(KernelKind::kNormForward)]
      .points.clear();
  const Planned one = planned(1, {"--micro-batch-size", "2"});
  try {
    predict_step_time(one.args.model, one.mesh, one.ranks, m);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "machine 'by hand' has no fp32 rate for norm_forward (1 rank(s) a host); add it "
                 "or calibrate it");
  }
  const Planned eight = planned(8, {"--micro-batch-size", "1"});
  try {
    predict(eight);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "the layout needs 8 ranks = 2 hosts of 4 ranks, machine 'by hand' has 1");
  }
}

}  // namespace
}  // namespace tessera::plan

namespace tessera::plan {
namespace {

// Several gradient buckets queued on the communication thread: when nothing of a collective is
// hidden (overlap 0, a host whose cores do the transfer) every bucket's time adds up, k latencies
// and the bytes once; when all is hidden only what outlasts backward shows. With virtual stages
// the trainer reduces after the last chunk, overlap or not.
TEST(StepTime, BucketQueueAndOverlapShare) {
  const Planned p = planned(2, {"--micro-batch-size", "2", "--ddp-bucket-size", "20000"});
  MachineDescription m = hand_machine();
  m.configurations[1].intra_host.overlap = 0;
  const train::ModelStateBytes states = train::theoretical_model_states(p.args.model, p.ranks[0]);
  const double elements = states.parameter_elements;
  const double buckets = std::ceil(elements / p.ranks[0].bucket_elements);
  ASSERT_GT(buckets, 3);
  const double serial = predict_step_time(p.args.model, p.mesh, p.ranks, m).components.dp_comm;
  EXPECT_NEAR(serial, buckets * kLink.latency_s + 4 * elements / kLink.bus_bytes_per_s,
              1e-3 * serial);
  const double hidden = predict(p).components.dp_comm;
  EXPECT_LT(hidden, 0.5 * serial);
  // Buckets are cut from the end of the gradients; the last reduced is what remains at the
  // start, ready when backward ends, and (each bucket taking microseconds against a backward of
  // milliseconds) the only one left to wait for.
  const double last = elements - (buckets - 1) * p.ranks[0].bucket_elements;
  EXPECT_NEAR(hidden, kLink.seconds(CollectiveKind::kAllReduce, 4 * last, 2), 1e-12);

  const std::vector<std::string> interleaved = {"--micro-batch-size",
                                                "1",
                                                "--pipeline-model-parallel-size",
                                                "2",
                                                "--num-layers-per-virtual-pipeline-stage",
                                                "1"};
  std::vector<std::string> off = interleaved;
  off.push_back("--no-overlap-grad-reduce");
  const Planned on4 = planned(4, interleaved), off4 = planned(4, off);
  EXPECT_DOUBLE_EQ(predict(on4).components.dp_comm, predict(off4).components.dp_comm);
}

// A group whose ranks are on different hosts uses the links between hosts.
TEST(StepTime, GroupsAcrossHostsUseTheInterHostLinks) {
  MachineDescription m = hand_machine();
  m.hosts = 2;
  m.configurations.erase(m.configurations.begin() + 1, m.configurations.end());  // 1 rank a host
  for (auto& r : m.configurations[0].intra_host.rates) r = LinkRate{};
  const LinkRate slow{1e-5, 1e9};
  m.inter_host.fill(slow);
  const Planned p = planned(2, {"--micro-batch-size", "2"});
  const double P = train::theoretical_model_states(p.args.model, p.ranks[0]).parameter_elements;
  EXPECT_NEAR(predict_step_time(p.args.model, p.mesh, p.ranks, m).components.dp_comm,
              slow.seconds(CollectiveKind::kAllReduce, 4 * P, 2), 1e-12);
}

}  // namespace
}  // namespace tessera::plan

namespace tessera::plan {
namespace {

// NVMe optimizer offload: refused on a machine without storage rates (one line naming the
// calibration that measures them); with them, the iteration's I/O is the swapper's (fp32
// compute: two arrays, 8 bytes an owned element read and written, plus the gradients' 4 written
// at the boundary and read by the step) and its exposed time joins the step as offload_io.
TEST(StepTime, OptimizerOffloadPricesTheSwap) {
  const Planned p = planned(
      1, {"--micro-batch-size", "2", "--zero-stage", "1", "--offload-optimizer-nvme-path", "/tmp"});
  try {
    predict(p);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "machine 'by hand' has no storage rates for NVMe offload: measure them with "
                 "tessera-plan --calibrate --nvme-path DIR (DIR on the offload's device)");
  }
  MachineDescription m = hand_machine();
  for (HostConfiguration& c : m.configurations) c.storage = StorageRates{1e9, 2e9};
  const StepTimePrediction t = predict_step_time(p.args.model, p.mesh, p.ranks, m);
  const double owned = train::optimizer_owned_elements(p.args.model, p.ranks[0]);
  const OptimizerSwapTimes& swap = t.optimizer_swap[0];
  EXPECT_DOUBLE_EQ(swap.read_bytes, 12 * owned);
  EXPECT_DOUBLE_EQ(swap.write_bytes, 12 * owned);
  // One sub-group, no pipelining: the step reads the gradients and writes the state back.
  EXPECT_NEAR(swap.visit, 4 * owned / 1e9 + 8 * owned / 2e9, 1e-12);
  EXPECT_NEAR(t.components.offload_io, swap.exposed(), 1e-12);  // re-faults free here
  EXPECT_NEAR(t.step_s, t.components.total(), 1e-15);
  // ZeRO 3 parameters on NVMe (every part swapped): their reads, re-faults and writes join
  // offload_io.
  const Planned params =
      planned(1, {"--micro-batch-size", "2", "--zero-stage", "3", "--offload-param-nvme-path",
                  "/tmp", "--offload-param-max-in-cpu", "0"});
  const StepTimePrediction swapped =
      predict_step_time(params.args.model, params.mesh, params.ranks, m);
  EXPECT_GT(swapped.components.offload_io, 0);
  EXPECT_NEAR(swapped.step_s, swapped.components.total(), 1e-15);
  EXPECT_THROW(predict(params), Error);  // no storage rates
}

}  // namespace
}  // namespace tessera::plan
