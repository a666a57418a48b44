#include "tessera/plan/layer_work.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/model/activation_memory.h"
#include "tessera/model/shard.h"

namespace tessera::plan {
namespace {

using comm::GroupKind;

// The shapes of one rank's layer: tokens N of the micro-batch (whole sequences), residual rows R
// (N / TP under sequence parallelism), widths of this rank's projections.
struct Shape {
  double N, R, C, q, kv, F, up, T, B, heads, head_dim;
  DType dtype;
  int tp;
  bool sp;
  bool own_type_sums;  // 16-bit activations' TP sums sent in their own type (--tp-reduce-in-16-bit)
  // Bytes an activation element takes in a TP all-reduce or reduce-scatter: fp32 copies of
  // 16-bit activations by default, the activations themselves with own_type_sums.
  double reduced_bytes() const { return own_type_sums ? dtype_size(dtype) : 4.0; }
};

Shape shape_of(const model::ModelConfig& c, const train::RankLayout& r) {
  Shape s;
  s.tp = r.tp;
  s.sp = r.sequence_parallel && r.tp > 1;
  s.dtype = r.compute;
  s.own_type_sums = r.tp_reduce_in_16_bit && r.compute != DType::kF32;
  s.N = static_cast<double>(r.tokens);
  s.R = s.sp ? s.N / r.tp : s.N;
  s.C = c.hidden_size;
  const double hd = c.head_dim();
  s.head_dim = hd;
  s.heads = static_cast<double>(c.num_attention_heads) / r.tp;
  s.q = s.heads * hd;
  s.kv = model::units_per_rank(c.kv_heads(), r.tp) * hd;
  s.F = static_cast<double>(c.ffn()) / r.tp;
  s.up = c.swiglu ? 2 * s.F : s.F;
  s.B = static_cast<double>(r.micro_batch_size);
  s.T = s.N / s.B;
  return s;
}

class PassBuilder {
 public:
  PassBuilder(PassWork& pass, const Shape& s) : pass_(pass), s_(s) {}
  void kernel(KernelKind kind, double size, double amount, DType dtype) {
    if (amount > 0) pass_.kernels.push_back({kind, dtype, size, amount});
  }
  void kernel(KernelKind kind, double elements) { kernel(kind, elements, elements, s_.dtype); }
  // (`dtype`: the router's products run in fp32 whatever the compute dtype.)
  void gemm(KernelKind kind, double M, double N, double K, DType dtype) {
    kernel(kind, std::min({M, N, K}), 2 * M * N * K, dtype);
  }
  void gemm(KernelKind kind, double M, double N, double K) { gemm(kind, M, N, K, s_.dtype); }
  void collective(CollectiveKind kind, GroupKind group, double bytes, int ranks = 0,
                  bool behind_attention = false) {
    pass_.comms.push_back({kind, group, bytes, ranks, behind_attention});
  }
  // A linear layer's forward (N x in -> N x out), its bias added by the kernel.
  void linear_forward(double in, double out, bool bias) {
    gemm(KernelKind::kGemmForward, s_.N, out, in);
    if (bias) kernel(KernelKind::kAdd, s_.N * out);
  }
  // Its backward: the input gradient and the weight gradient (and the bias' sum).
  void linear_backward(double in, double out, bool bias) {
    gemm(KernelKind::kGemmInputGrad, s_.N, in, out);
    gemm(KernelKind::kGemmWeightGrad, out, in, s_.N);
    if (bias) kernel(KernelKind::kAdd, s_.N * out);
  }
  // The residual stream's rows gathered before a column-parallel layer (sequence parallelism).
  void gather_rows() {
    if (s_.sp)
      collective(CollectiveKind::kAllGather, GroupKind::kTensor,
                 s_.N * s_.C * dtype_size(s_.dtype));
  }
  // A row-parallel layer's partial sums reduced over TP (reduce-scattered into rows under
  // sequence parallelism); 16-bit activations are reduced in fp32 copies (widened, then rounded),
  // or in their own type with --tp-reduce-in-16-bit.
  void reduce_rows() {
    if (s_.tp == 1) return;
    collective(s_.sp ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
               GroupKind::kTensor, s_.N * s_.C * s_.reduced_bytes());
    if (s_.dtype != DType::kF32 && !s_.own_type_sums) {
      kernel(KernelKind::kAdd, s_.N * s_.C);
      kernel(KernelKind::kAdd, s_.R * s_.C);
    }
  }
  // Hidden dropout (when on) and the residual add, forward or backward.
  void append(const PassWork& other) { pass_.append(other); }
  // An MLP (model/mlp.h) over `rows` whole rows, `act` activation columns and `up` up-projection
  // columns on this rank, its output (forward) or input gradient (backward) all-reduced over
  // `tp` > 1 ranks (in fp32 copies, or in their own type, as reduce_rows): an expert's or the
  // shared expert's, never sequence-parallel.
  void mlp_forward(double rows, double act, double up, bool bias, int tp) {
    gemm(KernelKind::kGemmForward, rows, up, s_.C);
    if (bias) kernel(KernelKind::kAdd, rows * up);
    kernel(KernelKind::kActivationForward, rows * up);
    gemm(KernelKind::kGemmForward, rows, s_.C, act);
    if (tp > 1)
      collective(CollectiveKind::kAllReduce, GroupKind::kTensor, rows * s_.C * s_.reduced_bytes());
    if (bias) kernel(KernelKind::kAdd, rows * s_.C);
  }
  void mlp_backward(double rows, double act, double up, bool bias, int tp) {
    if (bias) kernel(KernelKind::kAdd, rows * s_.C);
    gemm(KernelKind::kGemmInputGrad, rows, act, s_.C);
    gemm(KernelKind::kGemmWeightGrad, s_.C, act, rows);
    kernel(KernelKind::kActivationBackward, rows * up);
    if (bias) kernel(KernelKind::kAdd, rows * up);
    gemm(KernelKind::kGemmInputGrad, rows, s_.C, up);
    gemm(KernelKind::kGemmWeightGrad, up, s_.C, rows);
    if (tp > 1)
      collective(CollectiveKind::kAllReduce, GroupKind::kTensor, rows * s_.C * s_.reduced_bytes());
  }
  void dropout_add(double dropout) {
    if (dropout > 0) kernel(KernelKind::kDropout, s_.R * s_.C);
    kernel(KernelKind::kAdd, s_.R * s_.C);
  }

 private:
  PassWork& pass_;
  const Shape& s_;
};

// The attention core of one micro-batch on this rank, forward and backward (LayerWork's comment
// says how each context-parallel type is priced). FLOPs count as for the whole-sequence kernel:
// 2 B T^2 HD a head forward (two products over half the T x T scores), the same units backward.
// `recompute`: what selective recomputation reruns in backward: the forward less the q/k/v
// all-to-all (the core reruns on the head-split q/k/v it saved, model/attention.cc).
struct CoreWork {
  PassWork forward, backward, recompute;
};
CoreWork attention_core_work(const Shape& s, const train::RankLayout& r, int layer,
                             float attention_dropout) {
  using context::CommType;
  CoreWork w;
  // The forward is built as what recomputation reruns, `qkv_in` (the q/k/v all-to-all) put in
  // front at the end.
  PassWork qkv_in;
  PassBuilder f(w.recompute, s), b(w.backward, s), in(qkv_in, s);
  const double e = dtype_size(s.dtype), hd = s.head_dim;
  const auto core = [&](double size, double flops) {
    f.kernel(KernelKind::kAttentionForward, size, flops, s.dtype);
    b.kernel(KernelKind::kAttentionBackward, size, flops, s.dtype);
    // The probabilities' dropout mask, drawn in each pass over the scores (flops count 4 HD a
    // causal score: its two products).
    if (attention_dropout > 0) {
      const double scores = flops / (4 * hd);
      f.kernel(KernelKind::kAttentionDropout, size, scores, s.dtype);
      b.kernel(KernelKind::kAttentionDropout, size, scores, s.dtype);
    }
  };
  const auto done = [&] {
    w.forward = qkv_in;
    w.forward.append(w.recompute);
    return w;
  };
  const int N = r.cp;
  if (N <= 1) {
    core(s.T, 2 * s.B * s.T * s.T * hd * s.heads);
    return done();
  }
  TESSERA_CHECK_MSG(layer >= 0 && static_cast<size_t>(layer) < r.cp_types.size(),
                    "internal: no context-parallel type for layer " + std::to_string(layer));
  const CommType type = r.cp_types[layer];
  const double S = s.T * N;  // the whole sequence; s.T is this rank's share
  const double kv_heads = s.kv / hd;
  if (type == CommType::kAllGather) {
    const double K = s.B * s.T * 2 * s.kv * e, D = s.B * s.T * 2 * s.kv * 4;
    f.collective(CollectiveKind::kAllGather, GroupKind::kContext, N * K);
    b.collective(CollectiveKind::kAllGather, GroupKind::kContext, N * K);
    core(s.T, 2 * s.B * S * S * hd * s.heads / N);
    b.collective(CollectiveKind::kReduceScatter, GroupKind::kContext, N * D);
    return done();
  }
  // The all-to-all within groups of A ranks, then a ring across R of them.
  const int A = type == CommType::kA2A ? N : type == CommType::kA2AP2P ? r.cp_a2a : 1;
  const int R = N / A;
  double L = s.T, heads = s.heads, kv = kv_heads;  // a rank's tokens and heads after it
  double qkv_bytes = 0, out_bytes = 0;             // its q/k/v and output after it
  if (A > 1) {
    L = s.T * A;
    heads = s.heads / A;
    kv = kv_heads >= A ? kv_heads / A : 1;  // fewer groups than ranks: each takes the one it reads
    qkv_bytes = s.B * L * (heads + 2 * kv) * hd * e;
    out_bytes = s.B * L * heads * hd * e;
    // An all-to-all sends (A - 1) / A of the rank's buffer: all-gather's share of its output.
    in.collective(CollectiveKind::kAllGather, GroupKind::kContext, qkv_bytes, A);
    b.collective(CollectiveKind::kAllGather, GroupKind::kContext, out_bytes, A);
  }
  if (R == 1) {
    core(L, 2 * s.B * L * L * hd * heads);
  } else {
    const double K = s.B * L * 2 * kv * hd * e, D = s.B * L * 2 * kv * hd * 4;
    for (int step = 1; step < R; ++step) {
      f.collective(CollectiveKind::kSendRecv, GroupKind::kContext, K, 2, true);
      b.collective(CollectiveKind::kSendRecv, GroupKind::kContext, K, 2, true);
    }
    // dK/dV travel after each block's backward, waited for at once (block_attention.cc): only
    // the key/value blocks' transfers run behind a block's kernels.
    for (int step = 0; step < R; ++step)
      b.collective(CollectiveKind::kSendRecv, GroupKind::kContext, D, 2);
    core(L, 2 * s.B * (R * L) * (R * L) * hd * heads / R);
  }
  if (A > 1) {
    f.collective(CollectiveKind::kAllGather, GroupKind::kContext, out_bytes, A);
    b.collective(CollectiveKind::kAllGather, GroupKind::kContext, qkv_bytes, A);
  }
  return done();
}

// An MoE block (model/moe_layer.cc) in place of the MLP, one micro-batch, balanced routing
// (model::balanced_moe_rows, as the memory prediction counts its rows): the block's input
// gathered under SP; the router's product in fp32 (and its top-k, priced as element-wise work
// over the logits); the rows permuted, sent to their experts' ranks and back (all-to-all: a rank
// sends (EP - 1)/EP of its rows, priced at the all-gather's rate, which moves that share; the
// all-gather dispatcher: every rank's rows to every rank) with their reorders; each local
// expert's MLP over its rows (split over TP with its own all-reduces, or whole); the weighted
// sum back; with experts whole under TP, the output (no SP) and the logits' and input gradients
// summed over TP; the shared expert over the whole micro-batch; backward the reverse.
struct MoeWork {
  PassWork forward, backward;
};
MoeWork moe_work(const model::ModelConfig& c, const Shape& s, const train::RankLayout& r) {
  const model::MoeConfig& m = c.moe;
  const model::MoeRows rows =
      model::balanced_moe_rows(c, r.tokens, r.ep, r.expert_tp, r.experts_whole ? r.tp : 1);
  const double E = m.num_experts, local_experts = E / r.ep;
  const double e = dtype_size(s.dtype), C = s.C, N = s.N;
  const double act = static_cast<double>(c.moe_ffn()) / r.expert_tp;
  const double up = c.swiglu ? 2 * act : act;
  const bool bias = c.add_bias_linear, fold = r.experts_whole && r.tp > 1;
  const bool allgather = m.dispatcher == moe::DispatcherType::kAllGather;
  const double exchanged = allgather ? r.ep * rows.permuted * C * e : rows.permuted * C * e;
  const CollectiveKind exchange = CollectiveKind::kAllGather;
  MoeWork w;
  PassBuilder f(w.forward, s), b(w.backward, s);
  const auto travel = [&](PassBuilder& p) {  // dispatch or combine: the exchange and reorder
    if (!rows.exchanged) return;
    p.collective(exchange, GroupKind::kExpert, exchanged, r.ep);
    p.kernel(KernelKind::kAdd, rows.local * C);
  };
  // Forward.
  f.gather_rows();
  // (In fp64, --moe-router-dtype fp64, the router runs in scalar loops outside kernels::gemm, so
  // tessera-train's gemm_s does not count what compute_gemm_s does here.)
  f.gemm(KernelKind::kGemmForward, N, E, C, DType::kF32);
  if (r.tp > 1 && !s.sp)  // TP rank 0's logits decide: broadcast, the whole buffer sent
    f.collective(CollectiveKind::kSendRecv, GroupKind::kTensor, N * E * 4);
  f.kernel(KernelKind::kAdd, N * E);  // the top-k
  if (r.cp > 1 && m.aux_loss_coeff > 0 && m.load_balancing != model::MoeLoadBalancing::kNone) {
    // The counts (int64) of the micro-batch, or of each sequence.
    const double rows = m.load_balancing == model::MoeLoadBalancing::kSeqAuxLoss ? s.B : 1;
    f.collective(CollectiveKind::kAllReduce, GroupKind::kContext, rows * E * 8);
  }
  if (rows.exchanged) f.collective(CollectiveKind::kAllGather, GroupKind::kExpert, r.ep * E * 8);
  f.kernel(KernelKind::kAdd, rows.permuted * C);  // permute
  travel(f);
  for (int x = 0; x < static_cast<int>(local_experts); ++x)
    f.mlp_forward(rows.per_expert, act, up, bias, r.expert_tp);
  travel(f);
  f.kernel(KernelKind::kAdd, rows.permuted * C);  // the weighted sum
  if (fold && !s.sp)
    f.collective(CollectiveKind::kAllReduce, GroupKind::kTensor, N * C * s.reduced_bytes());
  if (m.shared_expert_size > 0) {
    const double shared = static_cast<double>(m.shared_expert_size) / r.tp;
    f.mlp_forward(N, shared, c.swiglu ? 2 * shared : shared, bias, r.tp);
    f.kernel(KernelKind::kAdd, N * C);
  }
  // Backward.
  if (s.sp) b.collective(CollectiveKind::kAllGather, GroupKind::kTensor, N * C * e);
  b.kernel(KernelKind::kAdd, 2 * rows.permuted * C);  // the rows' and the weights' gradients
  travel(b);
  for (int x = 0; x < static_cast<int>(local_experts); ++x)
    b.mlp_backward(rows.per_expert, act, up, bias, r.expert_tp);
  travel(b);
  b.kernel(KernelKind::kAdd, rows.permuted * C);  // summed into the tokens' gradients
  b.kernel(KernelKind::kAdd, N * E);              // through the routing
  if (fold) {
    b.collective(CollectiveKind::kAllReduce, GroupKind::kTensor, N * E * 4);
    if (!s.sp) b.collective(CollectiveKind::kAllReduce, GroupKind::kTensor, N * C * 4);
  }
  b.gemm(KernelKind::kGemmWeightGrad, E, C, N, DType::kF32);
  b.gemm(KernelKind::kGemmInputGrad, N, C, E, DType::kF32);
  if (m.shared_expert_size > 0) {
    const double shared = static_cast<double>(m.shared_expert_size) / r.tp;
    b.mlp_backward(N, shared, c.swiglu ? 2 * shared : shared, bias, r.tp);
  }
  b.kernel(KernelKind::kAdd, 2 * N * C);  // the fp32 sum and its rounding
  return w;
}

}  // namespace

void PassWork::append(const PassWork& other) {
  kernels.insert(kernels.end(), other.kernels.begin(), other.kernels.end());
  comms.insert(comms.end(), other.comms.begin(), other.comms.end());
}

LayerWork layer_work(const model::ModelConfig& c, const train::RankLayout& r, int layer) {
  const Shape s = shape_of(c, r);
  const bool rope = c.position_embedding == model::PositionEmbedding::kRope;
  const CoreWork core = attention_core_work(s, r, layer, c.attention_dropout);
  const double qkv = s.q + 2 * s.kv;
  LayerWork w;
  w.attention_core = core.recompute;
  PassBuilder f(w.forward, s);
  f.kernel(KernelKind::kNormForward, s.R * s.C);
  f.gather_rows();
  f.linear_forward(s.C, qkv, c.qkv_bias());
  if (rope) f.kernel(KernelKind::kRope, s.N * (s.q + s.kv));
  f.append(core.forward);
  f.linear_forward(s.q, s.C, false);
  f.reduce_rows();
  if (c.add_bias_linear) f.kernel(KernelKind::kAdd, s.R * s.C);
  f.dropout_add(c.hidden_dropout);
  f.kernel(KernelKind::kNormForward, s.R * s.C);
  const bool moe = c.moe.enabled() && c.is_moe_layer(layer);
  const MoeWork experts = moe ? moe_work(c, s, r) : MoeWork{};
  if (moe) {
    f.append(experts.forward);
  } else {
    f.gather_rows();
    f.linear_forward(s.C, s.up, c.add_bias_linear);
    f.kernel(KernelKind::kActivationForward, s.N * s.up);
    f.linear_forward(s.F, s.C, false);
    f.reduce_rows();
    if (c.add_bias_linear) f.kernel(KernelKind::kAdd, s.R * s.C);
  }
  f.dropout_add(c.hidden_dropout);

  // Backward, in transformer_layer.cc's order; a gathered input's gradient is reduce-scattered
  // back into rows (sequence parallelism) or all-reduced (the column-parallel layer's input).
  PassBuilder b(w.backward, s);
  if (c.hidden_dropout > 0) b.kernel(KernelKind::kDropout, s.R * s.C);
  if (moe) {
    b.append(experts.backward);
  } else {
    // A row-parallel layer's bias is added after the reduction, on the rank's rows: its
    // gradient is summed there too.
    if (c.add_bias_linear) b.kernel(KernelKind::kAdd, s.R * s.C);
    b.gather_rows();  // the row-parallel output's gradient, gathered
    b.linear_backward(s.F, s.C, false);
    b.kernel(KernelKind::kActivationBackward, s.N * s.up);
    b.gather_rows();  // the up projection's input, gathered again from the rows it kept
    b.linear_backward(s.C, s.up, c.add_bias_linear);
    b.reduce_rows();
  }
  b.kernel(KernelKind::kNormBackward, s.R * s.C);
  b.kernel(KernelKind::kAdd, s.R * s.C);
  if (c.hidden_dropout > 0) b.kernel(KernelKind::kDropout, s.R * s.C);
  if (c.add_bias_linear) b.kernel(KernelKind::kAdd, s.R * s.C);
  b.gather_rows();
  b.linear_backward(s.q, s.C, false);
  b.append(core.backward);
  if (rope) b.kernel(KernelKind::kRope, s.N * (s.q + s.kv));
  b.gather_rows();  // the QKV projection's input, gathered again
  b.linear_backward(s.C, qkv, c.qkv_bias());
  b.reduce_rows();
  b.kernel(KernelKind::kNormBackward, s.R * s.C);
  b.kernel(KernelKind::kAdd, s.R * s.C);
  return w;
}

PassWork recompute_work(const train::RankLayout& r, const LayerWork& layer) {
  using G = model::RecomputePolicy::Granularity;
  if (r.recompute.granularity == G::kFull) return layer.forward;
  if (r.recompute.granularity == G::kSelective) return layer.attention_core;
  return {};
}

LayerWork embedding_work(const model::ModelConfig& c, const train::RankLayout& r) {
  const Shape s = shape_of(c, r);
  const bool learned = c.position_embedding == model::PositionEmbedding::kLearnedAbsolute;
  LayerWork w;
  PassBuilder f(w.forward, s);
  // The vocabulary-parallel lookup writes whole rows (zeros outside this rank's vocabulary
  // range), reduced over TP; positions are added on every rank.
  f.kernel(KernelKind::kEmbedding, s.N * s.C * (learned ? 2 : 1));
  f.reduce_rows();
  if (c.hidden_dropout > 0) f.kernel(KernelKind::kDropout, s.R * s.C);
  PassBuilder b(w.backward, s);
  if (c.hidden_dropout > 0) b.kernel(KernelKind::kDropout, s.R * s.C);
  b.gather_rows();
  b.kernel(KernelKind::kEmbedding, s.N * s.C * (learned ? 2 : 1));
  return w;
}

PassWork head_work(const model::ModelConfig& c, const train::RankLayout& r) {
  const Shape s = shape_of(c, r);
  const double V = static_cast<double>(c.padded_vocab_size(r.tp)) / r.tp;
  PassWork w;
  PassBuilder h(w, s);
  h.kernel(KernelKind::kNormForward, s.R * s.C);
  h.gather_rows();
  h.gemm(KernelKind::kGemmForward, s.N, V, s.C);
  // The loss over a vocabulary split: each row's max, sum of exponentials and target logit are
  // all-reduced over TP (three small fp32 all-reduces).
  h.kernel(KernelKind::kCrossEntropy, s.N * V);
  if (r.tp > 1)
    for (int i = 0; i < 3; ++i)
      h.collective(CollectiveKind::kAllReduce, GroupKind::kTensor, s.N * 4);
  h.gemm(KernelKind::kGemmInputGrad, s.N, s.C, V);
  h.gemm(KernelKind::kGemmWeightGrad, V, s.C, s.N);
  h.reduce_rows();
  h.kernel(KernelKind::kNormBackward, s.R * s.C);
  return w;
}

}  // namespace tessera::plan
