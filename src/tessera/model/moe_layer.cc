#include "tessera/model/moe_layer.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "tessera/core/error.h"
#include "tessera/kernels/elementwise.h"
#include "tessera/kernels/gemm.h"

namespace tessera::model {
namespace {

// Mixtral's names: softmax routing without a shared expert in a LLaMA-family model.
bool mixtral_names(const ModelConfig& cfg) {
  return cfg.family() == Family::kLlama && cfg.moe.shared_expert_size == 0 &&
         cfg.moe.score == moe::ScoreFunction::kSoftmax;
}

Mlp::Names expert_names(const std::string& block, int e, const ModelConfig& cfg) {
  const std::string p = block + ".experts." + std::to_string(e);
  if (!mixtral_names(cfg)) return Mlp::dense_names(p, cfg);
  // w1 gate, w3 up, w2 down (Mixtral has no biases; they are named alike if asked for).
  if (cfg.swiglu) return Mlp::projection_names({p + ".w1", p + ".w3"}, p + ".w2");
  return Mlp::projection_names({p + ".w1"}, p + ".w2");
}

Mlp::Names shared_names(const std::string& block, const ModelConfig& cfg) {
  return Mlp::dense_names(block + ".shared_experts", cfg);
}

// The replicated parameters declared from index `first` on (the experts' biases after their
// row-parallel projections) are computed whole on every TP rank: the block runs on the whole
// micro-batch there.
void mark_tp_complete(ParameterSet& params, size_t first) {
  for (size_t i = first; i < params.all().size(); ++i)
    if (params.all()[i].shard.tp_dim < 0) params.all()[i].tp_complete = true;
}

// Rows [seq_begin, seq_begin + seq_local) of each of the B samples of `full` (B * T rows): this
// rank's sequence slice under --sequence-parallel (`sp`; the whole of `full` otherwise).
Tensor sequence_slice(const Tensor& full, const StepContext& ctx, bool sp) {
  if (!sp) return full;
  const int64_t C = full.dim(1);
  Tensor out = Tensor::empty({ctx.B * ctx.seq_local, C}, full.dtype());
  for (int64_t b = 0; b < ctx.B; ++b)
    out.slice_rows(b * ctx.seq_local, (b + 1) * ctx.seq_local)
        .copy_from(
            full.slice_rows(b * ctx.T + ctx.seq_begin, b * ctx.T + ctx.seq_begin + ctx.seq_local));
  return out;
}

// v summed element-wise over `group` in place (every member gets the sum; fp32, in MPI's order).
void all_reduce_sum(comm::ProcessGroup& group, std::vector<float>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kF32, MemoryCategory::kComm);
  std::copy(v.begin(), v.end(), t.data<float>());
  group.all_reduce(t, comm::ReduceOp::kSum).wait();
  std::copy(t.data<float>(), t.data<float>() + v.size(), v.begin());
}

// The fp32 copy of a compute-dtype tensor (the tensor itself when it is fp32).
Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return t;
  return t.to(DType::kF32, MemoryCategory::kActivations);
}

}  // namespace

void MoeLayerStats::add(const MoeLayerStats& o) {
  micro_batches += o.micro_batches;
  aux_loss += o.aux_loss;
  z_loss += o.z_loss;
  choices += o.choices;
  dropped += o.dropped;
  if (expert_count.size() < o.expert_count.size()) expert_count.resize(o.expert_count.size(), 0);
  for (size_t e = 0; e < o.expert_count.size(); ++e) expert_count[e] += o.expert_count[e];
}

std::string MoeLayer::block_prefix(const std::string& layer, const ModelConfig& cfg) {
  return layer + (mixtral_names(cfg) ? ".block_sparse_moe" : ".mlp");
}

void MoeLayer::declare(ParameterSet& params, const std::string& layer, const ModelConfig& cfg,
                       bool with_experts) {
  const std::string block = block_prefix(layer, cfg);
  params
      .add(block + ".gate.weight", {cfg.moe.num_experts, cfg.hidden_size}, InitKind::kNormal,
           cfg.init_method_std, true)
      .tp_complete = true;
  if (with_experts) declare_experts(params, layer, cfg);
  if (cfg.moe.shared_expert_size > 0) {
    const size_t before = params.all().size();
    Mlp::declare(params, shared_names(block, cfg), cfg.moe.shared_expert_size, cfg);
    mark_tp_complete(params, before);
  }
}

void MoeLayer::declare_experts(ParameterSet& params, const std::string& layer,
                               const ModelConfig& cfg, int ep_size, int ep_rank, bool whole) {
  const std::string block = block_prefix(layer, cfg);
  const int local = cfg.moe.num_experts / ep_size;
  for (int e = ep_rank * local; e < (ep_rank + 1) * local; ++e) {
    const size_t before = params.all().size();
    Mlp::declare(params, expert_names(block, e, cfg), cfg.moe_ffn(), cfg, !whole);
    for (size_t i = before; i < params.all().size(); ++i) {
      params.all()[i].expert = ep_size > 1 || whole;
      params.all()[i].tp_distinct = whole && params.tp_size() > 1;
    }
    mark_tp_complete(params, before);
  }
}

MoeLayer::MoeLayer(ParameterSet& params, const std::string& layer, const ModelConfig& cfg,
                   const parallel::TensorParallel* tp, comm::ProcessGroup* expert_group,
                   comm::ProcessGroup* cp_group, bool experts_whole)
    : moe_(cfg.moe),
      C_(cfg.hidden_size),
      tp_(tp),
      expert_group_(expert_group),
      cp_group_(cp_group != nullptr && cp_group->size() > 1 ? cp_group : nullptr) {
  TESSERA_CHECK(tp != nullptr);
  fold_ = experts_whole && tp->size() > 1;
  // The experts and the shared expert run on the whole micro-batch, not on a sequence slice.
  // (Their sums of 16-bit activations as the layer's: --tp-reduce-in-16-bit.)
  shared_tp_ =
      std::make_unique<parallel::TensorParallel>(tp->group(), false, tp->sixteen_bit_sums());
  expert_tp_ = experts_whole ? std::make_unique<parallel::TensorParallel>()
                             : std::make_unique<parallel::TensorParallel>(tp->group(), false,
                                                                          tp->sixteen_bit_sums());
  const std::string block = block_prefix(layer, cfg);
  router_w_ = params.get(block + ".gate.weight").value;
  router_dw_ = params.get(block + ".gate.weight").grad;
  const int ep = expert_group_ ? expert_group_->size() : 1;
  const int rank = expert_group_ ? expert_group_->rank() : 0;
  const int local = moe_.num_experts / ep;
  for (int e = rank * local; e < (rank + 1) * local; ++e)
    experts_.emplace_back(params, expert_names(block, e, cfg), cfg.moe_ffn(), cfg,
                          expert_tp_.get());
  if (moe_.shared_expert_size > 0)
    shared_.emplace_back(params, shared_names(block, cfg), moe_.shared_expert_size, cfg,
                         shared_tp_.get());
  expert_bias_.assign(moe_.num_experts, 0.0f);
  stats_.expert_count.assign(moe_.num_experts, 0);
}

std::vector<char> MoeLayer::owned_tokens(const StepContext& ctx, int64_t N) const {
  std::vector<char> own(N, 0);
  if (tp_->sequence_parallel()) {  // the rows this rank's residual stream holds
    for (int64_t b = 0; b < ctx.B; ++b)
      std::fill_n(own.begin() + b * ctx.T + ctx.seq_begin, ctx.seq_local, 1);
  } else {  // a block of 1/TP of the rows
    const int64_t n = tp_->size(), r = tp_->rank();
    std::fill(own.begin() + N * r / n, own.begin() + N * (r + 1) / n, 1);
  }
  return own;
}

void MoeLayer::router_logits(const Tensor& x, std::vector<float>& logits) const {
  const int64_t N = x.dim(0), E = moe_.num_experts;
  logits.resize(N * E);
  const Tensor xf = as_f32(x), wf = as_f32(router_w_);
  if (!moe_.router_fp64) {
    kernels::gemm(false, true, N, E, C_, 1.0f, xf.data<float>(), C_, wf.data<float>(), C_, 0.0f,
                  logits.data(), E);
    return;
  }
  // fp64: products and sums in double, rounded to fp32 once (the routing reads fp32 logits).
  const float* xs = xf.data<float>();
  const float* ws = wf.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t)
    for (int64_t e = 0; e < E; ++e) {
      double acc = 0;
      for (int64_t c = 0; c < C_; ++c) acc += double(xs[t * C_ + c]) * ws[e * C_ + c];
      logits[t * E + e] = static_cast<float>(acc);
    }
}

Tensor MoeLayer::forward(const Tensor& x_local, Saved& s, const StepContext& ctx) const {
  TESSERA_CHECK(x_local.dim(1) == C_);
  // Under --sequence-parallel: the whole micro-batch (every TP rank computes the same block).
  const Tensor x = tp_->sequence_parallel() ? tp_->column_input_forward(x_local, ctx.B) : x_local;
  const int64_t N = x.dim(0), E = moe_.num_experts;
  s.inp = x;
  router_logits(x, s.logits);
  if (tp_->size() > 1 && !tp_->sequence_parallel()) {
    // Every TP rank must route alike (they run the experts' collectives together), and without
    // SP their copies of x come from an all-reduce, which MPI does not promise to be bitwise
    // equal everywhere: TP rank 0's logits decide.
    Tensor logits = Tensor::empty({N, E}, DType::kF32, MemoryCategory::kComm);
    std::copy(s.logits.begin(), s.logits.end(), logits.data<float>());
    tp_->group()->broadcast(logits, 0).wait();
    std::copy(logits.data<float>(), logits.data<float>() + N * E, s.logits.begin());
  }
  s.routing = moe::route(s.logits.data(), N, moe_.router(),
                         moe_.expert_bias ? expert_bias_.data() : nullptr);
  moe::CapacityOptions cap;
  if (moe_.capacity_factor > 0) {
    cap.capacity = moe::expert_capacity(N, moe_.topk, moe_.num_experts, moe_.capacity_factor);
    cap.policy = moe_.drop_policy == MoeTokenDropPolicy::kProbs ? moe::DropPolicy::kProbs
                                                                : moe::DropPolicy::kPosition;
    cap.pad = moe_.pad_to_capacity;
  }
  s.perm = moe::make_permutation(s.routing, moe_.num_experts, cap);
  // Padding rows (computed, never read) go with TP rank 0's share.
  if (fold_) s.own = moe::keep_tokens(s.perm, owned_tokens(ctx, N), tp_->rank() == 0);
  const moe::Permutation& mine = rows_of(s);

  // Context parallel: the whole micro-batch's counts for the balancing losses.
  if (cp_group_ != nullptr && moe_.aux_loss_coeff > 0 &&
      moe_.load_balancing != MoeLoadBalancing::kNone) {
    // This rank's counts, as the router made them: the micro-batch's, or each sequence's.
    const bool per_sequence = moe_.load_balancing == MoeLoadBalancing::kSeqAuxLoss;
    const int64_t T = N / ctx.B, rows = per_sequence ? ctx.B : 1;
    Tensor counts = Tensor::empty({rows, E}, DType::kI64, MemoryCategory::kComm);
    for (int64_t b = 0; b < rows; ++b) {
      const std::vector<int64_t>& c =
          per_sequence
              ? moe::routing_slice(s.routing, b * T, (b + 1) * T, moe_.num_experts).expert_count
              : s.routing.expert_count;
      std::copy(c.begin(), c.end(), counts.data<int64_t>() + b * E);
    }
    cp_group_->all_reduce(counts, comm::ReduceOp::kSum).wait();
    s.cp_counts.assign(counts.data<int64_t>(), counts.data<int64_t>() + rows * E);
  }
  // Auxiliary losses (values here; gradients in backward).
  std::tie(s.aux_loss, s.z_loss) = balancing_losses(s, ctx.B, 1.0, nullptr);

  Tensor rows_in = Tensor::empty({mine.rows(), C_}, x.dtype());
  Tensor y = Tensor::empty({N, C_}, x.dtype());
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    moe::permute(rows_in.data<T>(), x.data<T>(), mine, C_);
  });
  if (expert_group_) {  // the rows travel to the ranks of their experts, and back
    s.plan = moe::make_dispatch_plan(mine, moe_.num_experts, *expert_group_, moe_.dispatcher);
    const Tensor local = moe::dispatch(rows_in, s.plan, *expert_group_);
    s.rows_out = moe::combine(experts_forward(local, s.plan.expert_begin, s.experts), s.plan,
                              *expert_group_);
  } else {
    s.rows_out = experts_forward(rows_in, mine.expert_begin, s.experts);
  }
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    moe::unpermute(y.data<T>(), s.rows_out.data<T>(), s.routing.weights.data(), mine, C_);
  });
  // Each TP rank holds its share's rows of y (zero elsewhere); under SP it keeps just those.
  // (Sums of a value and zeros: exact in either type; in y's own under --tp-reduce-in-16-bit.)
  if (fold_ && !tp_->sequence_parallel())
    tp_->group()
        ->all_reduce(y, comm::ReduceOp::kSum,
                     tp_->sixteen_bit_sums() == parallel::SixteenBitSums::kInOwnType ? y.dtype()
                                                                                     : DType::kF32)
        .wait();
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (!shared_.empty()) {
      const Tensor sh = shared_[0].forward(x, s.shared, 1);
      kernels::add(y.data<T>(), y.data<T>(), sh.data<T>(), N * C_);
    }
  });
  return sequence_slice(y, ctx, tp_->sequence_parallel());
}

Tensor MoeLayer::backward(const Tensor& dy_local, const Saved& s, const StepContext& ctx) const {
  const Tensor dy = tp_->sequence_parallel() ? tp_->row_output_backward(dy_local, ctx.B) : dy_local;
  const moe::Permutation& mine = rows_of(s);
  const int64_t N = dy.dim(0), E = moe_.num_experts, k = moe_.topk, R = mine.rows();
  std::vector<float> dweights(N * k), dlogits(N * E, 0.0f);
  std::vector<float> dx32(N * C_);
  Tensor dx = Tensor::empty({N, C_}, dy.dtype());
  const Tensor xf = as_f32(s.inp), wf = as_f32(router_w_);
  Tensor drows = Tensor::empty({R, C_}, dy.dtype());
  visit_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    moe::unpermute_backward(drows.data<T>(), dweights.data(), dy.data<T>(), s.rows_out.data<T>(),
                            s.routing.weights.data(), mine, C_);
  });
  Tensor drows_in;
  if (expert_group_) {
    const Tensor local = moe::dispatch(drows, s.plan, *expert_group_);
    drows_in = moe::combine(experts_backward(local, s.plan.expert_begin, s.experts), s.plan,
                            *expert_group_);
  } else {
    drows_in = experts_backward(drows, mine.expert_begin, s.experts);
  }
  visit_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    moe::permute_backward_f32(dx32.data(), drows_in.data<T>(), mine, C_);
  });

  // Router: the weights' gradient through the routing, plus the auxiliary losses' gradients
  // at their own scale.
  const moe::RouterConfig rc = moe_.router();
  moe::route_backward(dlogits.data(), s.logits.data(), s.routing, dweights.data(), rc);
  if (fold_) {
    // Each TP rank has its share's tokens' logit gradients (and input gradients), zero
    // elsewhere: the sums are the whole micro-batch's, exactly, on every TP rank. Under SP the
    // input gradients of the other ranks' tokens are not needed here.
    all_reduce_sum(*tp_->group(), dlogits);
    if (!tp_->sequence_parallel()) all_reduce_sum(*tp_->group(), dx32);
  }
  balancing_losses(s, ctx.B, ctx.moe_aux_loss_scale, dlogits.data());  // their own scale
  // dW_r += dlogits^T x;  dx += dlogits W_r (both in fp32).
  kernels::gemm(true, false, E, C_, N, 1.0f, dlogits.data(), E, xf.data<float>(), C_, 1.0f,
                router_dw_.data<float>(), C_);
  kernels::gemm(false, false, N, C_, E, 1.0f, dlogits.data(), E, wf.data<float>(), C_, 1.0f,
                dx32.data(), C_);

  visit_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (!shared_.empty()) {
      const Tensor dsh = shared_[0].backward(dy, s.shared, 1);
      const T* d = dsh.data<T>();
      for (int64_t i = 0; i < N * C_; ++i) dx32[i] += to_f32(d[i]);
    }
    T* out = dx.data<T>();
    for (int64_t i = 0; i < N * C_; ++i) out[i] = from_f32<T>(dx32[i]);
  });

  MoeLayerStats mb;
  // Under CP each rank holds its share of the micro-batch's losses (the shares sum to them over
  // the CP group): the micro-batch is counted once, on CP rank 0.
  mb.micro_batches = cp_group_ == nullptr || cp_group_->rank() == 0 ? 1 : 0;
  mb.aux_loss = s.aux_loss;
  mb.z_loss = s.z_loss;
  mb.choices = N * k;
  mb.dropped = s.perm.dropped;
  mb.expert_count = s.routing.expert_count;
  stats_.add(mb);
  return sequence_slice(dx, ctx, tp_->sequence_parallel());
}

std::pair<double, double> MoeLayer::balancing_losses(const Saved& s, int64_t B, double scale,
                                                     float* dlogits) const {
  const int64_t N = s.routing.tokens, E = moe_.num_experts, T = N / B;
  // Under CP these N tokens are 1/cp of the micro-batch's: the losses are over all of them.
  const int64_t cp = cp_group_ != nullptr ? cp_group_->size() : 1;
  const int64_t* counts = s.cp_counts.empty() ? nullptr : s.cp_counts.data();
  const moe::RouterConfig rc = moe_.router();
  double aux = 0, z = 0;
  if (moe_.load_balancing == MoeLoadBalancing::kAuxLoss && moe_.aux_loss_coeff > 0) {
    aux = moe::aux_loss(s.logits.data(), s.routing, rc, moe_.aux_loss_coeff * scale, dlogits,
                        counts, N * cp);
  } else if (moe_.load_balancing == MoeLoadBalancing::kSeqAuxLoss && moe_.aux_loss_coeff > 0) {
    for (int64_t b = 0; b < B; ++b)  // each sequence's loss, averaged over the B sequences
      aux += moe::aux_loss(s.logits.data() + b * T * E,
                           moe::routing_slice(s.routing, b * T, (b + 1) * T, moe_.num_experts), rc,
                           moe_.aux_loss_coeff * scale / static_cast<double>(B),
                           dlogits ? dlogits + b * T * E : nullptr,
                           counts != nullptr ? counts + b * E : nullptr, T * cp);
  }
  if (moe_.z_loss_coeff > 0)
    z = moe::z_loss(s.logits.data(), N, static_cast<int>(E), moe_.z_loss_coeff * scale, dlogits,
                    N * cp);
  return {aux, z};
}

Tensor MoeLayer::experts_forward(const Tensor& rows, const std::vector<int64_t>& expert_begin,
                                 std::vector<Mlp::Saved>& saved) const {
  Tensor out = Tensor::empty(rows.shape(), rows.dtype());
  saved.assign(experts_.size(), Mlp::Saved{});
  // An expert's rows change from step to step (as the router chooses, up to any capacity): the
  // products keep to a bounded set of oneDNN shapes (gemm.h).
  const kernels::VaryingTokenCounts varying;
  // One MLP per expert over its contiguous rows: two GEMMs each, never a loop over tokens.
  for (size_t e = 0; e < experts_.size(); ++e) {
    const int64_t b = expert_begin[e], end = expert_begin[e + 1];
    if (b == end) continue;
    out.slice_rows(b, end).copy_from(experts_[e].forward(rows.slice_rows(b, end), saved[e], 1));
  }
  return out;
}

Tensor MoeLayer::experts_backward(const Tensor& drows, const std::vector<int64_t>& expert_begin,
                                  const std::vector<Mlp::Saved>& saved) const {
  Tensor out = Tensor::empty(drows.shape(), drows.dtype());
  const kernels::VaryingTokenCounts varying;  // as in experts_forward
  for (size_t e = 0; e < experts_.size(); ++e) {
    const int64_t b = expert_begin[e], end = expert_begin[e + 1];
    if (b == end) continue;
    out.slice_rows(b, end).copy_from(experts_[e].backward(drows.slice_rows(b, end), saved[e], 1));
  }
  return out;
}

MoeLayerStats MoeLayer::take_stats() const {
  MoeLayerStats out = stats_;
  stats_ = MoeLayerStats{};
  stats_.expert_count.assign(moe_.num_experts, 0);
  return out;
}

void MoeLayer::update_expert_bias(const std::vector<int64_t>& counts) {
  if (!moe_.expert_bias) return;
  TESSERA_CHECK(static_cast<int>(counts.size()) == moe_.num_experts);
  double mean = 0;
  for (int64_t c : counts) mean += static_cast<double>(c);
  mean /= moe_.num_experts;
  for (int e = 0; e < moe_.num_experts; ++e) {
    const double diff = mean - static_cast<double>(counts[e]);
    const float sign = diff > 0 ? 1.0f : (diff < 0 ? -1.0f : 0.0f);
    expert_bias_[e] += moe_.bias_update_rate * sign;
  }
}

void MoeLayer::set_expert_bias(const std::vector<float>& bias) {
  TESSERA_CHECK(static_cast<int>(bias.size()) == moe_.num_experts);
  expert_bias_ = bias;
}

}  // namespace tessera::model
