// Flash-style causal self-attention (contract in attention.h), compiled once per CPU target.
//
// Forward (FlashAttention-2 style): a task is a run of query blocks (kBlock rows) of one
// (sample, head). Each block streams the key blocks up to the diagonal and keeps, per query,
// the running max m and sum l of the softmax (online softmax) and an fp32 output tile that is
// rescaled by exp(m_old - m_new) when the max grows. Only lse = m + log(l) is saved.
//
// Backward: one task per (sample, query head). It walks key blocks j in order and, for each,
// the query blocks i >= j, recomputing P = exp(S - lse) tile by tile. dK_j and dV_j live in
// tiles for the duration of j; dQ of the whole head lives in an fp32 buffer of the task. Every
// sum therefore has a fixed order: results are bitwise identical for any thread count, with no
// atomics. Query heads of a GQA group write dK/dV into per-head fp32 partials that a last pass
// sums in head order.
//
// Score tiles are kept transposed (keys x queries), so per-query state (max, sum, lse,
// rowsum(dO * O), dropout masks) is a 16-lane vector over 16 queries. The tile products run on
// one register-blocked kernel (tile_gemm) whose blocking is the target's (kTileRows x
// kTileVecs); everything is fp32 inside whatever the storage. The blocking changes only which
// products run together, never the order of a sum, so targets differ only where fmadd is fused
// or exp rounds differently (simd/vec.h).
//
// (Longer than the usual file: the tile GEMM, the lane-parallel Philox and the 16 x 16
// transposes exist only for this kernel and are kept next to it.)

#include "tessera/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/fast_exp.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

#include "tessera/kernels/attention_tiles.inc"

// Everything a task needs to locate heads in the packed buffers.
struct Geometry {
  int64_t B, T;
  int NH, KV, HD;
  int64_t width;    // (NH + 2 KV) HD: elements per token of qkv
  int64_t ldh;      // leading dimension of fp32 (rows, HD) tiles: HD rounded up to 16
  int64_t ldt;      // leading dimension of fp32 (HD, T) transposed heads: T rounded up to 16
  int64_t nblocks;  // ceil(T / kBlock)
  float scale;      // 1 / sqrt(HD)
  const int32_t* doc_start = nullptr;  // (B, T) first visible key of each query, or nullptr
  int group() const { return NH / KV; }
  int64_t q_col(int h) const { return int64_t{h} * HD; }
  int64_t k_col(int h) const { return (int64_t{NH} + h / group()) * HD; }
  int64_t v_col(int h) const { return (int64_t{NH} + KV + h / group()) * HD; }
};

Geometry make_geometry(int64_t B, int64_t T, int NH, int KV, int HD, const AttentionDropout& d) {
  TESSERA_CHECK(B >= 0 && T >= 0 && NH > 0 && KV > 0 && HD > 0);
  TESSERA_CHECK_MSG(NH % KV == 0, "attention: NH must be a multiple of KV");
  TESSERA_CHECK_MSG(d.p >= 0.0f && d.p < 1.0f, "attention: dropout p must be in [0, 1)");
  // Philox counters carry the key index / 4 in 32 bits.
  TESSERA_CHECK(T < (int64_t{1} << 33));
  Geometry g;
  g.B = B;
  g.T = T;
  g.NH = NH;
  g.KV = KV;
  g.HD = HD;
  g.width = (int64_t{NH} + 2 * KV) * HD;
  g.ldh = round_up16(HD);
  g.ldt = round_up16(T);
  g.nblocks = (T + kBlock - 1) / kBlock;
  g.scale = 1.0f / std::sqrt(static_cast<float>(HD));
  return g;
}

// The first key each query may see, (B, T), or nullptr when every query sees keys from 0
// (plain causal). A sliding window is a per-query lower bound like a document start, so it
// rides on the document mask (and its skipping of hidden key blocks): the bound is
// max(doc_start, t - window + 1), materialised in `storage`.
const int32_t* visible_from(const int32_t* doc_start, int64_t B, int64_t T, int64_t window,
                            std::vector<int32_t>& storage) {
  TESSERA_CHECK_MSG(window >= 0, "attention: window must be >= 0");
  if (window == 0 || window >= T) return doc_start;
  storage.resize(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t in_window = std::max<int64_t>(0, t - window + 1);
      const int64_t doc = doc_start == nullptr ? 0 : doc_start[b * T + t];
      storage[b * T + t] = static_cast<int32_t>(std::max(in_window, doc));
    }
  return storage.data();
}

// Global dropout row of (sample b, head h, query 0); query q adds q.
uint64_t dropout_row_base(const AttentionDropout& d, const Geometry& g, int64_t b, int h) {
  return dropout_row(d, b, h, g.NH, g.T);
}

// True when no query of [q0, q0 + M) sees any key before k_end (the block can be skipped).
inline bool block_hidden(const Geometry& g, int64_t b, int64_t q0, int M, int64_t k_end) {
  return doc_hidden(g.doc_start == nullptr ? nullptr : g.doc_start + b * g.T + q0, M, k_end);
}

// ---------------------------------------------------------------------------------------------
// Forward.

struct ForwardTiles {
  explicit ForwardTiles(const Geometry& g)
      : qt(g.ldh * kBlock),
        k(g.T * g.ldh),
        v(g.T * g.ldh),
        st(kBlock * kBlock),
        o(kBlock * g.ldh) {}
  Scratch qt;      // (HD, Br) queries of the block times scale, transposed
  Scratch k;       // (T, ldh) keys of the head, as far as the task needs
  Scratch v;       // (T, ldh) values of the head, likewise
  Scratch st;      // (Bc, Br) scores, then probabilities, transposed
  Scratch o;       // (Br, ldh) output accumulator
  SoftmaxState s;  // running max and sum per query
  KeepMasks keep;  // dropout keep masks of the key block (fill_keep)
};

template <typename T>
void forward_block(T* out, float* lse, const T* qkv, const Geometry& g,
                   const AttentionDropout& dropout, int64_t b, int h, int64_t i, ForwardTiles& w) {
  const int64_t q0 = i * kBlock;
  const int M = static_cast<int>(std::min<int64_t>(kBlock, g.T - q0));
  const T* tok = qkv + b * g.T * g.width;  // token 0 of sample b
  load_tile_transposed(w.qt.get(), kBlock, tok + q0 * g.width + g.q_col(h), g.width, M, g.HD,
                       g.scale);
  std::fill(w.o.get(), w.o.get() + kBlock * g.ldh, 0.0f);
  std::fill(w.s.m, w.s.m + kBlock, -std::numeric_limits<float>::infinity());
  std::fill(w.s.l, w.s.l + kBlock, 0.0f);
  const bool drop = dropout.p > 0.0f;
  const float keep_scale = drop ? 1.0f / (1.0f - dropout.p) : 0.0f;
  const uint64_t row0 = drop ? dropout_row_base(dropout, g, b, h) + q0 : 0;
  DocMask doc;
  if (g.doc_start != nullptr) {
    doc.ds = g.doc_start + b * g.T + q0;
    doc.load(M);
  }

  for (int64_t j = 0; j <= i; ++j) {
    const int64_t k0 = j * kBlock;
    const int N = static_cast<int>(std::min<int64_t>(kBlock, g.T - k0));
    // Key blocks wholly before every query's document contribute nothing.
    if (j < i && block_hidden(g, b, q0, M, k0 + N)) continue;
    doc.k0 = k0;
    const float* k = w.k.get() + k0 * g.ldh;
    const float* v = w.v.get() + k0 * g.ldh;
    // S^T (N, M) = K (scale Q)^T.
    tile_gemm(w.st.get(), kBlock, k, g.ldh, 1, w.qt.get(), kBlock, N, M, g.HD, false);
    // k0 is a multiple of kBlock here: the masks start at row 0.
    if (drop) fill_keep(w.keep, dropout.key, row0, static_cast<uint64_t>(k0), M, N, dropout.p);
    softmax_step(w.st.get(), w.s, w.keep, M, N, j == i ? 0 : kAllVisible, keep_scale, doc);
    for (int r = 0; r < M; ++r) {
      float* o = w.o.get() + r * g.ldh;
      for (int d = 0; d < g.HD; ++d) o[d] *= w.s.alpha[r];
    }
    // O (M, HD) += P V, with P (M, N) read as the transposed view of P^T.
    tile_gemm(w.o.get(), g.ldh, w.st.get(), 1, kBlock, v, g.ldh, M, g.HD, N, true);
  }

  T* dst = out + (b * g.T + q0) * g.NH * g.HD + g.q_col(h);
  float* lse_row = lse + (b * g.NH + h) * g.T + q0;
  for (int r = 0; r < M; ++r) {
    store_tile(dst + r * g.NH * g.HD, 0, w.o.get() + r * g.ldh, 0, 1, g.HD, 1.0f / w.s.l[r]);
    lse_row[r] = w.s.m[r] + std::log(w.s.l[r]);
  }
}

// Query blocks [i_begin, i_end) of head h of sample b. Keys and values the blocks see are
// first copied into the thread's contiguous fp32 head buffers: read in place, the rows (width)
// apart fall into a few L1 sets (width * 4 bytes is a multiple of 1 KiB for usual head counts)
// and every block would fetch them again from L3.
template <typename T>
void forward_task(T* out, float* lse, const T* qkv, const Geometry& g,
                  const AttentionDropout& dropout, int64_t b, int h, int64_t i_begin, int64_t i_end,
                  ForwardTiles& w) {
  const T* tok = qkv + b * g.T * g.width;
  const int64_t keys = std::min(g.T, i_end * kBlock);
  load_tile(w.k.get(), g.ldh, tok + g.k_col(h), g.width, keys, g.HD, 1.0f);
  load_tile(w.v.get(), g.ldh, tok + g.v_col(h), g.width, keys, g.HD, 1.0f);
  for (int64_t i = i_begin; i < i_end; ++i) forward_block(out, lse, qkv, g, dropout, b, h, i, w);
}

// ---------------------------------------------------------------------------------------------
// Backward.

struct BackwardTiles {
  explicit BackwardTiles(const Geometry& g)
      : q(g.T * g.ldh),
        qt(g.HD * g.ldt),
        dout(g.T * g.ldh),
        doutt(g.HD * g.ldt),
        dq(g.T * g.ldh),
        delta(g.ldt),
        k(kBlock * g.ldh),
        v(kBlock * g.ldh),
        dk(kBlock * g.ldh),
        dv(kBlock * g.ldh),
        pt(kBlock * kBlock),
        dst(kBlock * kBlock) {}
  Scratch q;       // (T, ldh) the head's queries times scale
  Scratch qt;      // (HD, ldt) the same, transposed
  Scratch dout;    // (T, ldh) the head's output gradient
  Scratch doutt;   // (HD, ldt) the same, transposed
  Scratch dq;      // (T, ldh) dQ accumulator (divided by scale until written)
  Scratch delta;   // (T) rowsum(dout * out)
  Scratch k;       // (Bc, ldh) keys of the key block
  Scratch v;       // (Bc, ldh) values of the key block
  Scratch dk;      // (Bc, ldh) dK accumulator of the key block
  Scratch dv;      // (Bc, ldh) dV accumulator of the key block
  Scratch pt;      // (Bc, Br) probabilities after dropout, transposed
  Scratch dst;     // (Bc, Br) dP, then dS, transposed
  KeepMasks keep;  // dropout keep masks of the tile (fill_keep)
};

// dK and dV contributions of query head h of sample b. dk_dst/dv_dst point at key 0 of the
// head's destination rows, ld_dst apart; D is float (GQA partials) or T (dqkv directly).
template <typename T, typename D>
void backward_head(D* dk_dst, D* dv_dst, int64_t ld_dst, T* dq_dst, const T* dout, const T* qkv,
                   const T* out, const float* lse, const Geometry& g,
                   const AttentionDropout& dropout, int64_t b, int h, BackwardTiles& w) {
  const T* tok = qkv + b * g.T * g.width;
  const int64_t ldo = int64_t{g.NH} * g.HD;
  const T* dout_head = dout + b * g.T * ldo + g.q_col(h);
  const T* out_head = out + b * g.T * ldo + g.q_col(h);
  const float* lse_head = lse + (b * g.NH + h) * g.T;

  // The transposed copies come from the contiguous fp32 ones (already in cache).
  load_tile(w.q.get(), g.ldh, tok + g.q_col(h), g.width, g.T, g.HD, g.scale);
  load_tile_transposed(w.qt.get(), g.ldt, w.q.get(), g.ldh, g.T, g.HD, 1.0f);
  load_tile(w.dout.get(), g.ldh, dout_head, ldo, g.T, g.HD, 1.0f);
  load_tile_transposed(w.doutt.get(), g.ldt, w.dout.get(), g.ldh, g.T, g.HD, 1.0f);
  std::fill(w.dq.get(), w.dq.get() + g.T * g.ldh, 0.0f);
  for (int64_t t = 0; t < g.T; ++t) {
    if (t + kPrefetchRows < g.T) prefetch_row(out_head + (t + kPrefetchRows) * ldo, g.HD);
    const float* dor = w.dout.get() + t * g.ldh;
    const T* orow = out_head + t * ldo;
    VecF acc = zero();
    for (int d = 0; d < g.HD; d += 16) {
      const int n = lanes_left(d, g.HD);
      acc = fmadd(load(dor + d, n), load(orow + d, n), acc);
    }
    w.delta.get()[t] = reduce_add(acc);
  }
  const bool drop = dropout.p > 0.0f;
  const float keep_scale = drop ? 1.0f / (1.0f - dropout.p) : 0.0f;
  const uint64_t row_base = drop ? dropout_row_base(dropout, g, b, h) : 0;

  for (int64_t j = 0; j < g.nblocks; ++j) {
    const int64_t k0 = j * kBlock;
    const int N = static_cast<int>(std::min<int64_t>(kBlock, g.T - k0));
    // Copied, not read in place, for the same L1-set reason as in forward_task.
    load_tile(w.k.get(), g.ldh, tok + k0 * g.width + g.k_col(h), g.width, N, g.HD, 1.0f);
    load_tile(w.v.get(), g.ldh, tok + k0 * g.width + g.v_col(h), g.width, N, g.HD, 1.0f);
    const float* k = w.k.get();
    const float* v = w.v.get();
    std::fill(w.dk.get(), w.dk.get() + kBlock * g.ldh, 0.0f);
    std::fill(w.dv.get(), w.dv.get() + kBlock * g.ldh, 0.0f);
    for (int64_t i = j; i < g.nblocks; ++i) {
      const int64_t q0 = i * kBlock;
      const int M = static_cast<int>(std::min<int64_t>(kBlock, g.T - q0));
      if (i > j && block_hidden(g, b, q0, M, k0 + N)) continue;
      DocMask doc;
      if (g.doc_start != nullptr) {
        doc.ds = g.doc_start + b * g.T + q0;
        doc.k0 = k0;
        doc.load(M);
      }
      // S^T = K (scale Q)^T and dP^T = V dO^T, both (N, M).
      tile_gemm(w.pt.get(), kBlock, k, g.ldh, 1, w.qt.get() + q0, g.ldt, N, M, g.HD, false);
      tile_gemm(w.dst.get(), kBlock, v, g.ldh, 1, w.doutt.get() + q0, g.ldt, N, M, g.HD, false);
      if (drop)
        fill_keep(w.keep, dropout.key, row_base + q0, static_cast<uint64_t>(k0), M, N, dropout.p);
      backward_softmax_step(w.pt.get(), w.dst.get(), w.keep, lse_head + q0, w.delta.get() + q0, M,
                            N, i == j ? 0 : kAllVisible, keep_scale, doc);
      // dV += P^T dO; dK += dS^T (scale Q); dQ += dS K (dS read as the view of dS^T).
      tile_gemm(w.dv.get(), g.ldh, w.pt.get(), kBlock, 1, w.dout.get() + q0 * g.ldh, g.ldh, N, g.HD,
                M, true);
      tile_gemm(w.dk.get(), g.ldh, w.dst.get(), kBlock, 1, w.q.get() + q0 * g.ldh, g.ldh, N, g.HD,
                M, true);
      tile_gemm(w.dq.get() + q0 * g.ldh, g.ldh, w.dst.get(), 1, kBlock, k, g.ldh, M, g.HD, N, true);
    }
    store_tile(dk_dst + k0 * ld_dst, ld_dst, w.dk.get(), g.ldh, N, g.HD, 1.0f);
    store_tile(dv_dst + k0 * ld_dst, ld_dst, w.dv.get(), g.ldh, N, g.HD, 1.0f);
  }
  store_tile(dq_dst, g.width, w.dq.get(), g.ldh, g.T, g.HD, g.scale);
}

}  // namespace

template <typename Float>
void attention_forward(Float* out, float* lse, const Float* qkv, int64_t B, int64_t T, int NH,
                       int KV, int HD, const AttentionDropout& dropout, const int32_t* doc_start,
                       int64_t window) {
  Geometry g = make_geometry(B, T, NH, KV, HD, dropout);
  if (doc_start != nullptr) {
    for (int64_t i = 0; i < B * T; ++i)
      TESSERA_CHECK_MSG(doc_start[i] >= 0 && doc_start[i] <= i % T,
                        "attention: doc_start[t] must be in [0, t]");
  }
  std::vector<int32_t> first_keys;
  g.doc_start = visible_from(doc_start, B, T, window, first_keys);
  // A task is a run of query blocks of one head, so the head's keys and values are loaded once
  // per task; heads are split into chunks only when there are too few heads to keep every
  // thread busy (about four tasks per thread).
  const int64_t heads = B * NH;
  const int64_t want = 4 * static_cast<int64_t>(omp_get_max_threads());
  const int64_t chunks = heads == 0 ? 1
                                    : std::clamp<int64_t>((want + heads - 1) / heads, 1,
                                                          std::max<int64_t>(g.nblocks, 1));
#pragma omp parallel
  {
    ForwardTiles tiles(g);
    // Later query blocks see more keys: hand out the expensive (last) chunks first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < heads * chunks; ++task) {
      const int64_t chunk = chunks - 1 - task / heads;
      const int64_t bh = task % heads;
      forward_task(out, lse, qkv, g, dropout, bh / NH, static_cast<int>(bh % NH),
                   chunk * g.nblocks / chunks, (chunk + 1) * g.nblocks / chunks, tiles);
    }
  }
}

template <typename Float>
void attention_backward(Float* dqkv, const Float* dout, const Float* qkv, const Float* out,
                        const float* lse, int64_t B, int64_t T, int NH, int KV, int HD,
                        const AttentionDropout& dropout, const int32_t* doc_start, int64_t window) {
  Geometry g = make_geometry(B, T, NH, KV, HD, dropout);
  std::vector<int32_t> first_keys;  // doc_start was checked by the forward pass that made lse
  g.doc_start = visible_from(doc_start, B, T, window, first_keys);
  const int group = g.group();
  // GQA: per-query-head dK/dV partials (B, NH, T, HD) each, summed below in head order.
  std::vector<float> partial_k, partial_v;
  if (group > 1) {
    partial_k.resize(static_cast<size_t>(B * NH * T * HD));
    partial_v.resize(partial_k.size());
  }
#pragma omp parallel
  {
    BackwardTiles tiles(g);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < B * NH; ++task) {
      const int64_t b = task / NH;
      const int h = static_cast<int>(task % NH);
      Float* dq_dst = dqkv + b * T * g.width + g.q_col(h);
      if (group == 1) {
        Float* base = dqkv + b * T * g.width;
        backward_head(base + g.k_col(h), base + g.v_col(h), g.width, dq_dst, dout, qkv, out, lse, g,
                      dropout, b, h, tiles);
      } else {
        const int64_t off = task * T * HD;
        backward_head(partial_k.data() + off, partial_v.data() + off, int64_t{HD}, dq_dst, dout,
                      qkv, out, lse, g, dropout, b, h, tiles);
      }
    }
    if (group > 1) {
#pragma omp for collapse(2)
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t t = 0; t < T; ++t) {
          Float* row = dqkv + (b * T + t) * g.width;
          for (int kv = 0; kv < KV; ++kv) {
            for (int which = 0; which < 2; ++which) {
              const float* src = (which == 0 ? partial_k : partial_v).data();
              Float* dst = row + (which == 0 ? g.k_col(kv * group) : g.v_col(kv * group));
              for (int d = 0; d < HD; ++d) {
                float acc = 0.0f;
                for (int hh = kv * group; hh < (kv + 1) * group; ++hh)
                  acc += src[((b * NH + hh) * T + t) * HD + d];
                dst[d] = from_f32<Float>(acc);
              }
            }
          }
        }
      }
    }
  }
}

void register_attention() {
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::attention_forward<T>>(kThisTarget, &attention_forward<T>);
    register_kernel<&kernels::attention_backward<T>>(kThisTarget, &attention_backward<T>);
  });
}

TESSERA_TARGET_END
