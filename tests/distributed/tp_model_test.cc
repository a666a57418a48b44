// The whole model under tensor (and sequence) parallelism against the single-process model, with
// TP = the world size: every rank builds both, runs the same micro-batches, completes its
// gradients (TensorParallelGrads) and compares the gathered shards with the single-process
// values, loss and gradient norm. Configs: GPT-2 style (tied, biases, LayerNorm, learned
// positions, dropout on) and LLaMA style (GQA with key/value heads replicated once TP exceeds the
// 2 groups, RoPE, SwiGLU, untied, dropout on), each with and without --sequence-parallel, two
// samples per micro-batch (the SP permutation) and two micro-batches (gradient accumulation).
// Also: the buffers one micro-batch hands MPI (the runtime's accounting) against the analytic
// count.
// ranks: 1 2 4
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "dist_main.h"
#include "tessera/comm/parallel_state.h"
#include "tessera/model/gpt_model.h"
#include "tessera/distributed/gather_parameter.h"
#include "tessera/distributed/tensor_parallel_grads.h"
#include "testing/numeric.h"

namespace tessera::model {
namespace {

using comm::OpType;
using comm::ProcessGroup;
using parallel::TensorParallel;

ModelConfig gpt_config() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 8;
  c.max_position_embeddings = 8;
  c.vocab_size = 61;
  c.make_vocab_size_divisible_by = 8;  // 61 -> 64 at TP 1 and 2, 64 at TP 4 as well (8 x 4 = 32)
  c.init_method_std = 0.2f;
  c.attention_dropout = 0.1f;
  c.hidden_dropout = 0.1f;
  return c;
}

ModelConfig llama_config() {
  ModelConfig c = gpt_config();
  c.group_query_attention = true;
  c.num_query_groups = 2;  // TP 4: each group on 2 ranks
  c.normalization = Normalization::kRMSNorm;
  c.position_embedding = PositionEmbedding::kRope;
  c.swiglu = true;
  c.ffn_hidden_size = 48;
  c.untie_embeddings_and_output_weights = true;
  c.add_bias_linear = false;
  return c;
}

struct Data {
  std::vector<int32_t> tokens, targets;
  std::vector<float> mask;
};

// Micro-batch m: B samples of T tokens, deterministic, with a loss mask.
Data micro_batch(int m, int64_t B, int64_t T, int64_t vocab) {
  Data d;
  for (int64_t i = 0; i < B * T; ++i) {
    d.tokens.push_back(static_cast<int32_t>((7 * i + 3 + 11 * m) % vocab));
    d.targets.push_back(static_cast<int32_t>((5 * i + 1 + 3 * m) % vocab));
    d.mask.push_back((i + m) % 7 == 3 ? 0.0f : 1.0f);
  }
  return d;
}

struct RunResult {
  double loss = 0;
  double grad_sum_squares = 0;
};

// Two micro-batches of forward/backward, then the TP gradient completion.
RunResult run(GPTModel& model, distributed::TensorParallelGrads* grads, int64_t B) {
  const ModelConfig& cfg = model.config();
  RunResult r;
  model.params().zero_grads();
  for (int m = 0; m < 2; ++m) {
    const Data d = micro_batch(m, B, cfg.seq_length, cfg.vocab_size);
    const Batch batch{d.tokens.data(), d.targets.data(), d.mask.data(), B, cfg.seq_length};
    const StepContext ctx = model.context(B, cfg.seq_length, m * B, 1234, 3, true);
    r.loss += model.forward_backward(batch, ctx, 0.01f).loss_sum;
  }
  grads->finalize();
  r.grad_sum_squares = grads->sum_squares();
  return r;
}

std::vector<float> values_of(const Tensor& t) {
  Tensor f = t.to(DType::kF32, MemoryCategory::kOther);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

void check_against_single_process(const ModelConfig& cfg, bool sequence_parallel) {
  auto mesh = testing::tensor_parallel_world_mesh();
  const TensorParallel tp(mesh->group(comm::GroupKind::kTensor), sequence_parallel);
  const int64_t B = 2;

  GPTModel ref(cfg, DType::kF32, 99);
  distributed::TensorParallelGrads ref_grads(ref.params(), TensorParallel());
  const RunResult want = run(ref, &ref_grads, B);

  GPTModel model(cfg, DType::kF32, 99, tp);
  distributed::TensorParallelGrads grads(model.params(), tp);
  const RunResult got = run(model, &grads, B);

  // fp32 with a different summation order (partial products reduced across ranks): relative
  // differences of a few ulps per operation, far below 1e-5.
  EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::fabs(want.loss));
  EXPECT_NEAR(got.grad_sum_squares, want.grad_sum_squares, 1e-5 * want.grad_sum_squares);
  for (const Parameter& p : model.params().all()) {
    const Parameter& r = ref.params().get(p.name);
    // Initialisation depends on global coordinates only: the gathered shards are bitwise equal.
    const Tensor value = distributed::gather_parameter(p, p.value.to(DType::kF32, MemoryCategory::kOther), tp);
    ASSERT_EQ(values_of(value), values_of(r.value)) << p.name;
    const Tensor grad = distributed::gather_parameter(p, p.grad, tp);
    EXPECT_LE(testing::max_scaled_error(values_of(grad), values_of(r.grad)), 1e-5) << p.name;
  }
}

TEST(TensorParallelModel, Gpt2MatchesSingleProcess) {
  check_against_single_process(gpt_config(), false);
}
TEST(TensorParallelModel, Gpt2SequenceParallelMatchesSingleProcess) {
  check_against_single_process(gpt_config(), true);
}
TEST(TensorParallelModel, LlamaMatchesSingleProcess) {
  check_against_single_process(llama_config(), false);
}
TEST(TensorParallelModel, LlamaSequenceParallelMatchesSingleProcess) {
  check_against_single_process(llama_config(), true);
}

// The buffers this rank hands MPI on the TP group for one micro-batch's forward and backward,
// against the analytic count. Per layer, forward: 2 all-reduces of the (b*s, h) activations
// (attention out, MLP down); backward: 2 more (the QKV and MLP-up input gradients). Around the
// layers: the embedding's all-reduce (forward) and the output layer's input-gradient all-reduce
// (backward), plus the 3 all-reduces of b*s fp32 values of vocab-parallel cross-entropy. An
// all-reduce hands MPI its whole tensor, S bytes, to send and to receive (in place). Under SP
// every activation all-reduce becomes an all-gather (sends the S/n slice, receives S) plus a
// reduce-scatter (sends S, receives S/n); the cross-entropy all-reduces are unchanged; and each
// layer's two column-parallel layers (QKV, MLP up), which keep only their slice of the input,
// gather it again in backward: 2 more all-gathers a layer. In the ring model (comm::ring_bytes)
// an activation all-reduce moves 2(n-1)/n * S, as its all-gather and reduce-scatter do together,
// and a gather again (n-1)/n * S.
// At TP 1 nothing is communicated (the mappings skip a group of one).
void check_comm_volume(const ModelConfig& cfg, bool sequence_parallel) {
  auto mesh = testing::tensor_parallel_world_mesh();
  auto group = mesh->group(comm::GroupKind::kTensor);
  const TensorParallel tp(group, sequence_parallel);
  const int64_t B = 2, n = tp.size();
  GPTModel model(cfg, DType::kF32, 7, tp);
  const Data d = micro_batch(0, B, cfg.seq_length, cfg.vocab_size);
  const Batch batch{d.tokens.data(), d.targets.data(), d.mask.data(), B, cfg.seq_length};
  group->reset_stats();
  model.forward_backward(batch, model.context(B, cfg.seq_length, 0, 1, 1, true), 1.0f);
  const comm::CommStats stats = group->stats();

  const int64_t S = B * cfg.seq_length * cfg.hidden_size * 4;  // an fp32 activation's bytes
  const int64_t AC = n > 1 ? 4 * cfg.num_layers + 2 : 0;       // activation collectives
  const int64_t CE = n > 1 ? B * cfg.seq_length * 4 : 0;       // a cross-entropy all-reduce's
  const auto expect_op = [&](OpType op, int64_t calls, int64_t sent, int64_t received) {
    SCOPED_TRACE(op_name(op));
    EXPECT_EQ(stats.calls_of(op), calls);
    EXPECT_EQ(stats.sent_bytes_of(op), sent);
    EXPECT_EQ(stats.received_bytes_of(op), received);
  };
  const int64_t ce_calls = n > 1 ? 3 : 0;
  const int64_t regathers = sequence_parallel && n > 1 ? 2 * cfg.num_layers : 0;
  if (sequence_parallel) {
    expect_op(OpType::kAllGather, AC + regathers, (AC + regathers) * S / n, (AC + regathers) * S);
    expect_op(OpType::kReduceScatter, AC, AC * S, AC * S / n);
    expect_op(OpType::kAllReduce, ce_calls, 3 * CE, 3 * CE);
  } else {
    expect_op(OpType::kAllGather, 0, 0, 0);
    expect_op(OpType::kReduceScatter, 0, 0, 0);
    expect_op(OpType::kAllReduce, AC + ce_calls, AC * S + 3 * CE, AC * S + 3 * CE);
  }
  EXPECT_EQ(stats.total_sent_bytes(),
            (sequence_parallel ? AC * (S + S / n) + regathers * S / n : AC * S) + 3 * CE);
  const int64_t ring =
      comm::ring_bytes(OpType::kAllReduce, n, stats.sent_bytes_of(OpType::kAllReduce)) +
      comm::ring_bytes(OpType::kAllGather, n, stats.received_bytes_of(OpType::kAllGather)) +
      comm::ring_bytes(OpType::kReduceScatter, n, stats.sent_bytes_of(OpType::kReduceScatter));
  EXPECT_EQ(ring, 2 * (n - 1) * (AC * S + 3 * CE) / n + (n - 1) * regathers * S / n);
}

TEST(TensorParallelModel, CommunicationVolumeMatchesAnalyticCount) {
  check_comm_volume(gpt_config(), false);
  check_comm_volume(llama_config(), false);
}
TEST(TensorParallelModel, SequenceParallelCommunicationVolumeMatchesAnalyticCount) {
  check_comm_volume(gpt_config(), true);
  check_comm_volume(llama_config(), true);
}

}  // namespace
}  // namespace tessera::model

int main(int argc, char** argv) { return tessera::testing::run_distributed_tests(argc, argv); }
