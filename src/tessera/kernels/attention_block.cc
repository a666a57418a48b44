// A block of queries against a block of keys (contract in attention_block.h), compiled once per
// CPU target on the tile machinery of the whole-sequence kernel (attention_tiles.inc). Forward is
// FlashAttention-2's loop over the key block for each query block of a (sample, head); backward
// walks, for each (sample, key/value group), its heads, the key blocks and the query blocks that
// see them, recomputing P = exp(S - lse) from the whole attention's lse.

#include "tessera/kernels/attention_block.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/fast_exp.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

#include "tessera/kernels/attention_tiles.inc"

void check_block(const AttentionBlock& a, const AttentionDropout& d) {
  TESSERA_CHECK(a.B >= 0 && a.q_len >= 0 && a.k_len >= 0 && a.q_pos >= 0 && a.k_pos >= 0);
  TESSERA_CHECK(a.q_pos + a.q_len <= a.seq && a.k_pos + a.k_len <= a.seq);
  TESSERA_CHECK(a.NH > 0 && a.KV > 0 && a.HD > 0 && a.NH % a.KV == 0);
  TESSERA_CHECK_MSG(d.p >= 0.0f && d.p < 1.0f, "attention: dropout p must be in [0, 1)");
  TESSERA_CHECK(a.seq < (int64_t{1} << 33));  // Philox counters carry the key index / 4
}

int64_t blocks_of(int64_t n) { return (n + kBlock - 1) / kBlock; }

// Global dropout row of (sample b, head h, the block's query 0).
uint64_t block_dropout_row(const AttentionDropout& d, const AttentionBlock& a, int64_t b, int h) {
  return dropout_row(d, b, h, a.NH, a.seq) + static_cast<uint64_t>(a.q_pos);
}

struct ForwardScratch {
  ForwardScratch(int64_t k_len, int64_t ldh)
      : qt(ldh * kBlock), k(k_len * ldh), v(k_len * ldh), st(kBlock * kBlock), o(kBlock * ldh) {}
  Scratch qt, k, v, st, o;
  SoftmaxState s;
  KeepMasks keep;
};

// Query blocks [i_begin, i_end) of head h of sample b.
template <typename T>
void forward_task(float* o, float* lse, const T* q, const T* k, const T* v, const AttentionBlock& a,
                  const AttentionDropout& d, int64_t b, int h, int64_t i_begin, int64_t i_end,
                  ForwardScratch& w) {
  const int64_t ldh = round_up16(a.HD);
  const int g = h / (a.NH / a.KV);
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.HD));
  // Keys the task's queries can see at all (causally): up to its last query's position.
  const int64_t last_q = a.q_pos + std::min(a.q_len, i_end * kBlock) - 1;
  const int64_t keys = std::clamp<int64_t>(last_q - a.k_pos + 1, 0, a.k_len);
  const T* kb = k + b * a.kv_sample + int64_t{g} * a.HD;
  const T* vb = v + b * a.kv_sample + int64_t{g} * a.HD;
  load_tile(w.k.get(), ldh, kb, a.kv_ld, keys, a.HD, 1.0f);
  load_tile(w.v.get(), ldh, vb, a.kv_ld, keys, a.HD, 1.0f);
  const bool drop = d.p > 0.0f;
  const float keep_scale = drop ? 1.0f / (1.0f - d.p) : 0.0f;
  for (int64_t i = i_begin; i < i_end; ++i) {
    const int64_t q0 = i * kBlock;
    const int M = static_cast<int>(std::min<int64_t>(kBlock, a.q_len - q0));
    const int64_t qp0 = a.q_pos + q0;
    load_tile_transposed(w.qt.get(), kBlock, q + b * a.q_sample + q0 * a.q_ld + int64_t{h} * a.HD,
                         a.q_ld, M, a.HD, scale);
    std::fill(w.o.get(), w.o.get() + kBlock * ldh, 0.0f);
    std::fill(w.s.m, w.s.m + kBlock, -std::numeric_limits<float>::infinity());
    std::fill(w.s.l, w.s.l + kBlock, 0.0f);
    DocMask doc;
    if (a.doc_start != nullptr) {
      doc.ds = a.doc_start + b * a.doc_sample + q0;
      doc.load(M);
    }
    for (int64_t k0 = 0; k0 < keys; k0 += kBlock) {
      const int N = static_cast<int>(std::min<int64_t>(kBlock, keys - k0));
      const int64_t kp0 = a.k_pos + k0;
      if (kp0 > qp0 + M - 1) break;  // no query of the block sees these keys, nor later ones
      if (doc_hidden(doc.ds, M, kp0 + N)) continue;
      doc.k0 = kp0;
      // S^T (N, M) = K (scale Q)^T.
      tile_gemm(w.st.get(), kBlock, w.k.get() + k0 * ldh, ldh, 1, w.qt.get(), kBlock, N, M, a.HD,
                false);
      int off = 0;
      if (drop)
        off = fill_keep(w.keep, d.key, block_dropout_row(d, a, b, h) + q0,
                        static_cast<uint64_t>(kp0), M, N, d.p);
      softmax_step(w.st.get(), w.s, w.keep + off, M, N, kp0 - qp0, keep_scale, doc);
      for (int r = 0; r < M; ++r) {
        float* orow = w.o.get() + r * ldh;
        for (int c = 0; c < a.HD; ++c) orow[c] *= w.s.alpha[r];
      }
      // O (M, HD) += P V, with P (M, N) read as the transposed view of P^T.
      tile_gemm(w.o.get(), ldh, w.st.get(), 1, kBlock, w.v.get() + k0 * ldh, ldh, M, a.HD, N, true);
    }
    float* lse_row = lse + (b * a.NH + h) * a.lse_ld + q0;
    for (int r = 0; r < M; ++r) {
      float* dst = o + b * a.o_sample + (q0 + r) * a.o_ld + int64_t{h} * a.HD;
      const bool saw = w.s.l[r] > 0.0f;
      const float inv = saw ? 1.0f / w.s.l[r] : 0.0f;
      for (int c = 0; c < a.HD; ++c) dst[c] = w.o.get()[r * ldh + c] * inv;
      lse_row[r] = saw ? w.s.m[r] + std::log(w.s.l[r]) : -std::numeric_limits<float>::infinity();
    }
  }
}

struct BackwardScratch {
  BackwardScratch(int64_t q_len, int64_t ldh, int64_t ldt, int HD)
      : q(q_len * ldh),
        qt(HD * ldt),
        dout(q_len * ldh),
        doutt(HD * ldt),
        dq(q_len * ldh),
        k(kBlock * ldh),
        v(kBlock * ldh),
        dk(kBlock * ldh),
        dv(kBlock * ldh),
        pt(kBlock * kBlock),
        dst(kBlock * kBlock) {}
  Scratch q, qt, dout, doutt, dq, k, v, dk, dv, pt, dst;
  KeepMasks keep;
};

// Every head of key/value group g of sample b.
template <typename T>
void backward_task(float* dq, float* dk, float* dv, const T* dout, const T* q, const T* k,
                   const T* v, const float* lse, const float* delta, const AttentionBlock& a,
                   const AttentionDropout& d, int64_t b, int g, BackwardScratch& w) {
  const int64_t ldh = round_up16(a.HD), ldt = round_up16(a.q_len);
  const int group = a.NH / a.KV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.HD));
  const bool drop = d.p > 0.0f;
  const float keep_scale = drop ? 1.0f / (1.0f - d.p) : 0.0f;
  const int64_t kv_off = b * a.kv_sample + int64_t{g} * a.HD;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    load_tile(w.q.get(), ldh, q + b * a.q_sample + int64_t{h} * a.HD, a.q_ld, a.q_len, a.HD, scale);
    load_tile_transposed(w.qt.get(), ldt, w.q.get(), ldh, a.q_len, a.HD, 1.0f);
    load_tile(w.dout.get(), ldh, dout + b * a.o_sample + int64_t{h} * a.HD, a.o_ld, a.q_len, a.HD,
              1.0f);
    load_tile_transposed(w.doutt.get(), ldt, w.dout.get(), ldh, a.q_len, a.HD, 1.0f);
    std::fill(w.dq.get(), w.dq.get() + a.q_len * ldh, 0.0f);
    const float* lse_h = lse + (b * a.NH + h) * a.lse_ld;
    const float* delta_h = delta + (b * a.NH + h) * a.lse_ld;
    const uint64_t row_base = drop ? block_dropout_row(d, a, b, h) : 0;
    for (int64_t k0 = 0; k0 < a.k_len; k0 += kBlock) {
      const int N = static_cast<int>(std::min<int64_t>(kBlock, a.k_len - k0));
      const int64_t kp0 = a.k_pos + k0;
      if (kp0 > a.q_pos + a.q_len - 1) break;  // no query sees these keys
      load_tile(w.k.get(), ldh, k + kv_off + k0 * a.kv_ld, a.kv_ld, N, a.HD, 1.0f);
      load_tile(w.v.get(), ldh, v + kv_off + k0 * a.kv_ld, a.kv_ld, N, a.HD, 1.0f);
      std::fill(w.dk.get(), w.dk.get() + kBlock * ldh, 0.0f);
      std::fill(w.dv.get(), w.dv.get() + kBlock * ldh, 0.0f);
      for (int64_t q0 = 0; q0 < a.q_len; q0 += kBlock) {
        const int M = static_cast<int>(std::min<int64_t>(kBlock, a.q_len - q0));
        const int64_t qp0 = a.q_pos + q0;
        if (kp0 > qp0 + M - 1) continue;  // the block's keys all come after these queries
        DocMask doc;
        if (a.doc_start != nullptr) {
          doc.ds = a.doc_start + b * a.doc_sample + q0;
          if (doc_hidden(doc.ds, M, kp0 + N)) continue;
          doc.k0 = kp0;
          doc.load(M);
        }
        // S^T = K (scale Q)^T and dP^T = V dO^T, both (N, M).
        tile_gemm(w.pt.get(), kBlock, w.k.get(), ldh, 1, w.qt.get() + q0, ldt, N, M, a.HD, false);
        tile_gemm(w.dst.get(), kBlock, w.v.get(), ldh, 1, w.doutt.get() + q0, ldt, N, M, a.HD,
                  false);
        int off = 0;
        if (drop)
          off = fill_keep(w.keep, d.key, row_base + q0, static_cast<uint64_t>(kp0), M, N, d.p);
        backward_softmax_step(w.pt.get(), w.dst.get(), w.keep + off, lse_h + q0, delta_h + q0, M, N,
                              kp0 - qp0, keep_scale, doc);
        // dV += P^T dO; dK += dS^T (scale Q); dQ += dS K (dS read as the view of dS^T).
        tile_gemm(w.dv.get(), ldh, w.pt.get(), kBlock, 1, w.dout.get() + q0 * ldh, ldh, N, a.HD, M,
                  true);
        tile_gemm(w.dk.get(), ldh, w.dst.get(), kBlock, 1, w.q.get() + q0 * ldh, ldh, N, a.HD, M,
                  true);
        tile_gemm(w.dq.get() + q0 * ldh, ldh, w.dst.get(), 1, kBlock, w.k.get(), ldh, M, a.HD, N,
                  true);
      }
      for (int r = 0; r < N; ++r) {
        float* dkr = dk + kv_off + (k0 + r) * a.kv_ld;
        float* dvr = dv + kv_off + (k0 + r) * a.kv_ld;
        for (int c = 0; c < a.HD; ++c) {
          dkr[c] += w.dk.get()[r * ldh + c];
          dvr[c] += w.dv.get()[r * ldh + c];
        }
      }
    }
    for (int64_t r = 0; r < a.q_len; ++r) {
      float* dqr = dq + b * a.o_sample + r * a.o_ld + int64_t{h} * a.HD;
      for (int c = 0; c < a.HD; ++c) dqr[c] += w.dq.get()[r * ldh + c] * scale;
    }
  }
}

}  // namespace

template <typename Float>
void attention_block_forward(float* o, float* lse, const Float* q, const Float* k, const Float* v,
                             const AttentionBlock& a, const AttentionDropout& dropout) {
  check_block(a, dropout);
  const int64_t nblocks = blocks_of(a.q_len), heads = a.B * a.NH;
  if (nblocks == 0 || heads == 0) return;
  // About four tasks per thread, as the whole-sequence kernel: heads split into runs of query
  // blocks when there are too few heads.
  const int64_t want = 4 * static_cast<int64_t>(omp_get_max_threads());
  const int64_t chunks = std::clamp<int64_t>((want + heads - 1) / heads, 1, nblocks);
#pragma omp parallel
  {
    ForwardScratch w(std::max<int64_t>(a.k_len, 1), round_up16(a.HD));
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < heads * chunks; ++task) {
      const int64_t chunk = chunks - 1 - task / heads;  // later queries see more keys: first
      const int64_t bh = task % heads;
      forward_task(o, lse, q, k, v, a, dropout, bh / a.NH, static_cast<int>(bh % a.NH),
                   chunk * nblocks / chunks, (chunk + 1) * nblocks / chunks, w);
    }
  }
}

template <typename Float>
void attention_block_backward(float* dq, float* dk, float* dv, const Float* dout, const Float* q,
                              const Float* k, const Float* v, const float* lse, const float* delta,
                              const AttentionBlock& a, const AttentionDropout& dropout) {
  check_block(a, dropout);
  if (a.q_len == 0 || a.k_len == 0) return;
#pragma omp parallel
  {
    BackwardScratch w(a.q_len, round_up16(a.HD), round_up16(a.q_len), a.HD);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < a.B * a.KV; ++task)
      backward_task(dq, dk, dv, dout, q, k, v, lse, delta, a, dropout, task / a.KV,
                    static_cast<int>(task % a.KV), w);
  }
}

void register_attention_block() {
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::attention_block_forward<T>>(kThisTarget, &attention_block_forward<T>);
    register_kernel<&kernels::attention_block_backward<T>>(kThisTarget,
                                                           &attention_block_backward<T>);
  });
}

TESSERA_TARGET_END
