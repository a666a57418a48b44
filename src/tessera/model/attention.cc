#include "tessera/model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/attention_block.h"
#include "tessera/kernels/attention_decode.h"
#include "tessera/kernels/attention_merge.h"
#include "tessera/kernels/elementwise.h"
#include "tessera/kernels/rope.h"

namespace tessera::model {

std::vector<std::string> Attention::qkv_names(const std::string& prefix, const ModelConfig& cfg,
                                              const char* suffix) {
  if (cfg.family() == Family::kGpt2) return {prefix + ".c_attn" + suffix};
  return {prefix + ".q_proj" + suffix, prefix + ".k_proj" + suffix, prefix + ".v_proj" + suffix};
}

std::string Attention::out_name(const std::string& prefix, const ModelConfig& cfg) {
  return prefix + (cfg.family() == Family::kGpt2 ? ".c_proj" : ".o_proj");
}

void Attention::declare(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg) {
  const int64_t C = cfg.hidden_size, HD = cfg.head_dim();
  const int64_t q_rows = cfg.num_attention_heads * HD, kv_rows = cfg.kv_heads() * HD;
  const float std = cfg.init_method_std;
  // Megatron scales the init of layers that write into the residual stream by 1/sqrt(2L).
  const float out_std = std / std::sqrt(2.0f * cfg.num_layers);
  // Rows split across TP by heads: query heads, key groups, value groups each on their own.
  const TpSection q{q_rows, cfg.num_attention_heads}, kv{kv_rows, cfg.kv_heads()};
  const auto w = qkv_names(prefix, cfg, ".weight");
  const auto b = qkv_names(prefix, cfg, ".bias");
  if (w.size() == 1) {  // GPT-2's fused c_attn: [q; k; v] rows
    const ShardSpec fused = ShardSpec::split(0, {q, kv, kv});
    params.add(w[0], {q_rows + 2 * kv_rows, C}, InitKind::kNormal, std, true, fused);
    if (cfg.qkv_bias())
      params.add(b[0], {q_rows + 2 * kv_rows}, InitKind::kZeros, 0.0f, false, fused);
  } else {
    const ShardSpec qs = ShardSpec::split(0, {q}), kvs = ShardSpec::split(0, {kv});
    params.add(w[0], {q_rows, C}, InitKind::kNormal, std, true, qs);
    params.add(w[1], {kv_rows, C}, InitKind::kNormal, std, true, kvs);
    params.add(w[2], {kv_rows, C}, InitKind::kNormal, std, true, kvs);
    if (cfg.qkv_bias()) {  // Qwen2 (--add-qkv-bias) has these without the others
      params.add(b[0], {q_rows}, InitKind::kZeros, 0.0f, false, qs);
      params.add(b[1], {kv_rows}, InitKind::kZeros, 0.0f, false, kvs);
      params.add(b[2], {kv_rows}, InitKind::kZeros, 0.0f, false, kvs);
    }
  }
  const std::string out = out_name(prefix, cfg);
  params.add(out + ".weight", {C, q_rows}, InitKind::kNormal, out_std, true,
             ShardSpec::split(1, {q}));
  if (cfg.add_bias_linear) params.add(out + ".bias", {C}, InitKind::kZeros, 0.0f, false);
}

Attention::Attention(ParameterSet& params, const std::string& prefix, const ModelConfig& cfg,
                     int layer, const parallel::TensorParallel* tp,
                     const context::ContextParallel* cp)
    : NH_global_(cfg.num_attention_heads),
      HD_(cfg.head_dim()),
      layer_(layer),
      rope_(cfg.position_embedding == PositionEmbedding::kRope),
      rope_theta_(cfg.rotary_base),
      rope_scaling_(cfg.rope_scaling),
      window_(cfg.sliding_window),
      dropout_p_(cfg.attention_dropout) {
  const int T = params.tp_size(), KV = cfg.kv_heads();
  NH_ = NH_global_ / T;
  KV_ = units_per_rank(KV, T);
  head_offset_ = params.tp_rank() * NH_;
  const std::string out = out_name(prefix, cfg);
  const bool bias = cfg.add_bias_linear;
  qkv_ = ColumnParallelLinear(
      Linear::bind(params, qkv_names(prefix, cfg, ".weight"),
                   cfg.qkv_bias() ? qkv_names(prefix, cfg, ".bias") : std::vector<std::string>{}),
      tp);
  Tensor out_bias, out_dbias;
  if (bias) {
    out_bias = params.get(out + ".bias").value;
    out_dbias = params.get(out + ".bias").grad;
  }
  out_ = RowParallelLinear(Linear::bind(params, {out + ".weight"}, {}), out_bias, out_dbias, tp);
  if (cp == nullptr || cp->size() == 1) return;
  cp_size_ = cp->size();
  const context::CommType type = cp->type_of(layer);
  // The block kernels take per-query first keys too, but a window there is not built or tested.
  if (window_ > 0 && window_ < cfg.seq_length && type != context::CommType::kA2A)
    throw Error("sliding_window " + std::to_string(window_) + " (< --seq-length " +
                std::to_string(cfg.seq_length) + ") with --context-parallel-size " +
                std::to_string(cp->size()) +
                ": only --cp-comm-type a2a supports sliding-window attention");
  if (type == context::CommType::kP2P || type == context::CommType::kAllGather) {
    mode_ = CpMode::kBlocks;
    blocks_ = context::BlockAttention(cp->group(), type);
    return;
  }
  // The all-to-all group: the whole CP group (a2a), or A consecutive CP ranks (a2a+p2p) whose
  // ring runs over the CP ranks A apart.
  const bool mixed = type == context::CommType::kA2AP2P;
  mode_ = mixed ? CpMode::kA2AP2P : CpMode::kA2A;
  const std::shared_ptr<comm::ProcessGroup>& group = mixed ? cp->a2a_group() : cp->group();
  const int A = group->size();
  a2a_rank_ = group->rank();
  for (int a = 0; a < A; ++a) a2a_cp_ranks_.push_back(cp->rank() - a2a_rank_ + a);
  exchange_ = context::HeadExchange(group);
  qkv_cols_ = context::qkv_columns(NH_, KV_, HD_, A);
  out_cols_ = context::head_columns(NH_, HD_, A);
  cp_heads_ = NH_ / A;
  cp_kv_ = static_cast<int>(qkv_cols_.heads_width / HD_ - cp_heads_) / 2;
  if (mixed) {
    std::vector<std::vector<int>> members(cp_size_ / A);
    for (int r = 0; r < cp_size_; ++r) members[r / A].push_back(r);
    blocks_ = context::BlockAttention(cp->ring_group(), cp_size_, members);
  }
}

kernels::AttentionDropout Attention::dropout(const StepContext& ctx) const {
  kernels::AttentionDropout d;
  d.p = ctx.training ? dropout_p_ : 0.0f;
  d.key = ctx.dropout_key(RngPurpose::kAttentionDropout, layer_);
  d.sample_offset = ctx.coords.sample_offset;
  d.head_offset = head_offset_;
  d.num_heads_global = NH_global_;
  return d;
}

// After the all-to-all a rank holds NH / A of the heads: the kernel's arguments are those of the
// single process (a2a) or of the ring over all-to-all groups (a2a+p2p) for those heads, whose
// dropout coordinates are their global head indices.
kernels::AttentionDropout Attention::head_split_dropout(const StepContext& ctx) const {
  kernels::AttentionDropout d = dropout(ctx);
  d.head_offset += a2a_rank_ * cp_heads_;
  return d;
}

context::BlockAttentionShape Attention::block_shape(const StepContext& ctx,
                                                    std::vector<int32_t>* doc) const {
  if (mode_ == CpMode::kBlocks)
    return {ctx.B, ctx.T, ctx.seq_global, NH_, KV_, HD_, dropout(ctx), ctx.doc_start};
  TESSERA_CHECK(doc != nullptr);
  // a2a+p2p: the all-to-all group's tokens, member by member, and their document starts.
  const int64_t A = static_cast<int64_t>(a2a_cp_ranks_.size()), rows = A * ctx.T;
  if (ctx.doc_start_global != nullptr) {
    doc->resize(ctx.B * rows);
    for (int64_t b = 0; b < ctx.B; ++b)
      for (int64_t a = 0; a < A; ++a)
        for (int64_t u = 0; u < ctx.T; ++u)
          (*doc)[b * rows + a * ctx.T + u] =
              ctx.doc_start_global[b * ctx.seq_global + SequenceSplit{cp_size_, a2a_cp_ranks_[a]}
                                                            .global(u, ctx.seq_global)];
  }
  return {ctx.B,  rows, ctx.seq_global,          cp_heads_,
          cp_kv_, HD_,  head_split_dropout(ctx), doc->empty() ? nullptr : doc->data()};
}

// The whole-sequence kernel of attention.h, forward and backward: the core without CP (this
// rank's heads, ctx.T tokens) and under a2a (1/N of them, the whole sequence).
struct Attention::Whole {
  int64_t B, T;
  int NH, KV, HD;
  kernels::AttentionDropout dropout;
  const int32_t* doc_start;
  int64_t window;
  void forward(Tensor& attn, Tensor& lse, const Tensor& qkv) const {
    attn = Tensor::empty({B * T, int64_t{NH} * HD}, qkv.dtype());
    lse = Tensor::empty({B, NH, T}, DType::kF32);
    visit_float(qkv.dtype(), [&](auto tag) {
      using F = decltype(tag);
      kernels::attention_forward(attn.data<F>(), lse.data<float>(), qkv.data<F>(), B, T, NH, KV, HD,
                                 dropout, doc_start, window);
    });
  }
  Tensor backward(const Tensor& dattn, const Tensor& qkv, const Tensor& attn,
                  const Tensor& lse) const {
    Tensor dqkv = Tensor::empty(qkv.shape(), dattn.dtype());
    visit_float(dattn.dtype(), [&](auto tag) {
      using F = decltype(tag);
      kernels::attention_backward(dqkv.data<F>(), dattn.data<F>(), qkv.data<F>(), attn.data<F>(),
                                  lse.data<float>(), B, T, NH, KV, HD, dropout, doc_start, window);
    });
    return dqkv;
  }
};

Attention::Whole Attention::whole(const StepContext& ctx) const {
  if (mode_ == CpMode::kA2A)
    return {ctx.B,
            ctx.seq_global,
            cp_heads_,
            cp_kv_,
            HD_,
            head_split_dropout(ctx),
            ctx.doc_start_global,
            window_};
  // Without CP a sample's T tokens are the whole sequence: row t is position t.
  return {ctx.B, ctx.T, NH_, KV_, HD_, dropout(ctx), ctx.doc_start, window_};
}

// The attention core from the roped qkv (after the all-to-all in the head-split modes): attn
// and lse, and in the head-split modes attn_heads (the kernel's output before the all-to-all
// back).
void Attention::core(Tensor& attn, Tensor& attn_heads, Tensor& lse, const Tensor& qkv,
                     const StepContext& ctx) const {
  std::vector<int32_t> doc;
  Tensor& out = head_split() ? attn_heads : attn;
  if (mode_ == CpMode::kBlocks || mode_ == CpMode::kA2AP2P)
    blocks_.forward(out, lse, qkv, block_shape(ctx, &doc));
  else
    whole(ctx).forward(out, lse, qkv);
  if (head_split())
    attn = exchange_.to_sequence(attn_heads, ctx.B, out_cols_, mode_ == CpMode::kA2A);
}

Tensor Attention::forward(const Tensor& x, Saved& s, const StepContext& ctx) const {
  s.qkv = qkv_.forward(x, ctx.B, &s.inp);
  if (rope_) {
    visit_float(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const bool per_sample = ctx.sample_positions != nullptr;
      kernels::rope_forward(s.qkv.data<T>(),
                            per_sample ? ctx.sample_positions : ctx.positions.data(), ctx.B, ctx.T,
                            NH_, KV_, HD_, rope_theta_, per_sample, ctx.seq_global, rope_scaling_);
    });
  }
  if (head_split()) s.qkv = exchange_.to_heads(s.qkv, ctx.B, qkv_cols_, mode_ == CpMode::kA2A);
  core(s.attn, s.attn_heads, s.lse, s.qkv, ctx);
  Tensor y = out_.forward(s.attn, ctx.B);
  if (recompute_core_) s.attn = s.attn_heads = s.lse = Tensor();
  return y;
}

Tensor Attention::backward(const Tensor& dy, const Saved& s, const StepContext& ctx) const {
  Tensor attn = s.attn, attn_heads = s.attn_heads, lse = s.lse;
  const bool in_order = mode_ == CpMode::kA2A;
  if (!attn.defined()) core(attn, attn_heads, lse, s.qkv, ctx);  // selective recomputation
  const Tensor dattn = out_.backward(dy, attn, ctx.B);
  // The core's backward (in the head split under a2a and a2a+p2p).
  const Tensor dcore = head_split() ? exchange_.to_heads(dattn, ctx.B, out_cols_, in_order) : dattn;
  const Tensor& core_out = head_split() ? attn_heads : attn;
  std::vector<int32_t> doc;
  Tensor dqkv = mode_ == CpMode::kBlocks || mode_ == CpMode::kA2AP2P
                    ? blocks_.backward(dcore, s.qkv, core_out, lse, block_shape(ctx, &doc))
                    : whole(ctx).backward(dcore, s.qkv, core_out, lse);
  // Selective recomputation's rerun outputs are freed before the QKV projection's backward (its
  // working set, model/activation_memory.h, does not hold them); otherwise these are handles to
  // what `s` keeps.
  attn = attn_heads = lse = Tensor();
  if (head_split()) dqkv = exchange_.to_sequence(dqkv, ctx.B, qkv_cols_, in_order);
  visit_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (rope_) {
      const bool per_sample = ctx.sample_positions != nullptr;
      kernels::rope_backward(dqkv.data<T>(),
                             per_sample ? ctx.sample_positions : ctx.positions.data(), ctx.B, ctx.T,
                             NH_, KV_, HD_, rope_theta_, per_sample, ctx.seq_global, rope_scaling_);
    }
  });
  return qkv_.backward(dqkv, s.inp, ctx.B);
}

// Sequences with at most this many new rows (decode steps) attend through the decode kernel;
// longer prompt chunks through the tiled block kernel, block by block.
constexpr int64_t kDecodeRows = 8;

Tensor Attention::forward_cached(const Tensor& x, const StepContext& ctx, const KvBlocks& cache,
                                 const std::vector<CachedSequence>& seqs) const {
  TESSERA_CHECK_MSG(mode_ == CpMode::kNone, "cached attention runs without context parallelism");
  const int64_t n = x.dim(0), O = int64_t{NH_} * HD_, kv_cols = 2 * int64_t{KV_} * HD_;
  TESSERA_CHECK(cache.row_elements() == kv_cols && ctx.sample_positions != nullptr);
  Tensor inp;
  Tensor qkv = qkv_.forward(x, ctx.B, &inp);
  const int64_t W = qkv.dim(1), bs = cache.block_size();
  Tensor attn = Tensor::empty({n, O}, qkv.dtype());
  visit_float(qkv.dtype(), [&](auto tag) {
    using F = decltype(tag);
    if (rope_)
      kernels::rope_forward(qkv.data<F>(), ctx.sample_positions, 1, n, NH_, KV_, HD_, rope_theta_,
                            /*per_sample=*/true, ctx.seq_global, rope_scaling_);
    visit_kv_element(cache.element(), [&](auto cache_tag) {
      using TC = decltype(cache_tag);
      // A cache block's rows as F for the block kernel: the block itself when the cache holds F,
      // else widened to fp32 by the vector kernels and stored as F (exact: F is fp32, or the
      // cache holds fp32 copies of F values or 8-bit floats, which fit bf16 and fp16 alike;
      // inference::parse_kv_cache_dtype refuses the 16-bit pairs that would not). Once per
      // block and prompt chunk, beside the chunk's attention over it.
      std::vector<float> widened32;
      std::vector<F> widened;
      auto block_as_f = [&](const void* block) -> const F* {
        if constexpr (std::is_same_v<TC, F>) return static_cast<const F*>(block);
        const int64_t elems = bs * kv_cols;
        widened32.resize(static_cast<size_t>(elems));
        kernels::widen_to_f32(widened32.data(), static_cast<const TC*>(block), elems);
        if constexpr (std::is_same_v<F, float>) return widened32.data();
        widened.resize(static_cast<size_t>(elems));
        kernels::round_from_f32(widened.data(), widened32.data(), elems);
        return widened.data();
      };
      int64_t r0 = 0;
      for (const CachedSequence& seq : seqs) {
        const int64_t rows = seq.rows, total = seq.past + rows;
        TESSERA_CHECK(static_cast<int64_t>(seq.blocks->size()) * bs >= total);
        // The new tokens' keys and values into their cache rows (rounded once to the cache's
        // type).
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t pos = seq.past + i;
          TC* row =
              static_cast<TC*>(cache.block(layer_, (*seq.blocks)[pos / bs])) + (pos % bs) * kv_cols;
          const F* kv = qkv.data<F>() + (r0 + i) * W + O;
          if constexpr (std::is_same_v<TC, F>)
            std::memcpy(row, kv, kv_cols * sizeof(F));
          else
            for (int64_t e = 0; e < kv_cols; ++e) row[e] = from_f32<TC>(to_f32(kv[e]));
        }
        if (rows <= kDecodeRows) {
          // A decode step: one call walks the whole block table (attention_decode.h) instead of
          // a parallel call and a log-sum-exp merge per block.
          std::vector<const TC*> blocks((total + bs - 1) / bs);
          for (size_t b = 0; b < blocks.size(); ++b)
            blocks[b] = static_cast<const TC*>(cache.block(layer_, (*seq.blocks)[b]));
          kernels::DecodeAttention d;
          d.rows = rows;
          d.past = seq.past;
          d.block_size = bs;
          d.q_ld = W;
          d.o_ld = O;
          d.kv_ld = kv_cols;
          d.v_offset = int64_t{KV_} * HD_;
          d.NH = NH_;
          d.KV = KV_;
          d.HD = HD_;
          d.window = window_;
          kernels::attention_decode_forward(attn.data<F>() + r0 * O, qkv.data<F>() + r0 * W,
                                            blocks.data(), d);
          r0 += rows;
          continue;
        }
        // A sliding window: query p sees keys (p - window, p] (window_ 0: all).
        std::vector<int32_t> first_key;
        if (window_ > 0) {
          first_key.resize(rows);
          for (int64_t i = 0; i < rows; ++i)
            first_key[i] = static_cast<int32_t>(std::max<int64_t>(0, seq.past + i - window_ + 1));
        }
        Tensor acc = Tensor::zeros({rows, O}, DType::kF32),
               L = Tensor::empty({NH_, rows}, DType::kF32);
        Tensor ob = Tensor::empty({rows, O}, DType::kF32),
               lb = Tensor::empty({NH_, rows}, DType::kF32);
        std::fill(L.data<float>(), L.data<float>() + L.numel(),
                  -std::numeric_limits<float>::infinity());
        for (int64_t k_pos = 0; k_pos < total; k_pos += bs) {
          if (window_ > 0 && k_pos + bs <= first_key[0]) continue;  // before every query's window
          kernels::AttentionBlock blk;
          blk.B = 1;
          blk.q_len = rows;
          blk.k_len = std::min(bs, total - k_pos);
          blk.q_pos = seq.past;
          blk.k_pos = k_pos;
          blk.seq = total;
          blk.NH = NH_;
          blk.KV = KV_;
          blk.HD = HD_;
          blk.q_sample = rows * W;
          blk.q_ld = W;
          blk.o_sample = rows * O;
          blk.o_ld = O;
          blk.kv_sample = bs * kv_cols;
          blk.kv_ld = kv_cols;
          blk.lse_ld = rows;
          blk.doc_start = first_key.empty() ? nullptr : first_key.data();
          blk.doc_sample = rows;
          const F* k = block_as_f(cache.block(layer_, (*seq.blocks)[k_pos / bs]));
          kernels::attention_block_forward(ob.data<float>(), lb.data<float>(),
                                           qkv.data<F>() + r0 * W, k, k + int64_t{KV_} * HD_, blk,
                                           kernels::AttentionDropout{});
          kernels::attention_merge(acc.data<float>(), L.data<float>(), ob.data<float>(),
                                   lb.data<float>(), 1, rows, NH_, HD_, 0, rows);
        }
        F* out = attn.data<F>() + r0 * O;
        for (int64_t i = 0; i < rows * O; ++i) out[i] = from_f32<F>(acc.data<float>()[i]);
        r0 += rows;
      }
      TESSERA_CHECK(r0 == n);
    });
  });
  return out_.forward(attn, ctx.B);
}

}  // namespace tessera::model
