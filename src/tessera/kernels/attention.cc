// Flash-style causal self-attention (contract in attention.h).
//
// Forward: one task per (sample, query head, query block of kBlock rows). The task streams the
// key blocks up to the diagonal and keeps, per query row, the running max m and sum l of the
// softmax (online softmax, FlashAttention-2) and an fp32 output tile that is rescaled by
// exp(m_old - m_new) whenever the max grows. Only lse = m + log(l) is saved.
//
// Backward: one task per (sample, query head). It walks key blocks j in order and, for each,
// the query blocks i >= j, recomputing P = exp(S - lse) tile by tile. dK_j and dV_j live in
// tiles for the duration of j; dQ of the whole head lives in an fp32 buffer of the task. Every
// sum therefore has a fixed order: results are bitwise identical for any thread count, with no
// atomics. Query heads of a GQA group write dK/dV into per-head fp32 partials that a last pass
// sums in head order.
//
// The small tile products run on one AVX-512 register-blocked kernel (tile_gemm); everything
// is fp32 inside whatever the storage type.

#include "tessera/kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/fast_exp.h"

namespace tessera::kernels {
namespace {

// Rows of a query block = columns of a key block. 64 keeps the per-thread tiles (a few 16 KiB
// fp32 tiles at HD = 64) inside L1/L2 and matches one 4-vector register panel.
constexpr int kBlock = 64;

// Owning 64-byte aligned fp32 scratch (tiles are read with full-width vector loads).
class Scratch {
 public:
  explicit Scratch(size_t n)
      : data_(static_cast<float*>(
            ::operator new[](std::max<size_t>(n, 16) * sizeof(float), std::align_val_t(64)))) {}
  ~Scratch() { ::operator delete[](data_, std::align_val_t(64)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const { return data_; }

 private:
  float* data_;
};

inline int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

inline __mmask16 lane_mask(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF)
                 : (n <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << n) - 1));
}

// ---------------------------------------------------------------------------------------------
// Tile products. C (M x N) = or += A (M x K) * B (K x N); B and C row-major; A's element (m, k)
// is A[m * a_rs + k * a_cs], so A can be a transposed view of a row-major tile (a_rs = 1).

// R rows by NV 16-lane vectors (N <= 16 * NV): R * NV accumulators stay in registers, each
// k-step loads NV vectors of B and broadcasts R scalars of A. (accumulate is a template
// parameter and every loop over r, v is unrolled: with a run-time branch in the epilogue GCC 12
// keeps acc in memory and stores all of it on every k-step, a 3x slowdown.)
template <int R, int NV, bool kAccumulate>
void panel(float* C, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
           int64_t ldb, int N, int K) {
  __mmask16 mask[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) mask[v] = lane_mask(N - 16 * v);
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int k = 0; k < K; ++k) {
    __m512 b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = _mm512_maskz_loadu_ps(mask[v], B + k * ldb + 16 * v);
    const float* a = A + k * a_cs;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r * a_rs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(ar, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* c = C + r * ldc + 16 * v;
      if constexpr (kAccumulate)
        _mm512_mask_storeu_ps(c, mask[v],
                              _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(mask[v], c)));
      else
        _mm512_mask_storeu_ps(c, mask[v], acc[r][v]);
    }
  }
}

template <int R, bool kAccumulate>
void panel_rows(float* C, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
                int64_t ldb, int N, int K) {
  switch ((N + 15) / 16) {
    case 1:
      panel<R, 1, kAccumulate>(C, ldc, A, a_rs, a_cs, B, ldb, N, K);
      break;
    case 2:
      panel<R, 2, kAccumulate>(C, ldc, A, a_rs, a_cs, B, ldb, N, K);
      break;
    case 3:
      panel<R, 3, kAccumulate>(C, ldc, A, a_rs, a_cs, B, ldb, N, K);
      break;
    default:
      panel<R, 4, kAccumulate>(C, ldc, A, a_rs, a_cs, B, ldb, N, K);
      break;
  }
}

template <bool kAccumulate>
void tile_gemm_impl(float* C, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs,
                    const float* B, int64_t ldb, int M, int N, int K) {
  // 6 rows x 4 vectors = 24 accumulators + 4 B vectors + 1 broadcast fit the 32 zmm registers.
  constexpr int kRows = 6;
  for (int n0 = 0; n0 < N; n0 += 64) {
    const int nn = std::min(64, N - n0);
    float* c = C + n0;
    const float* b = B + n0;
    int m = 0;
    for (; m + kRows <= M; m += kRows)
      panel_rows<kRows, kAccumulate>(c + m * ldc, ldc, A + m * a_rs, a_rs, a_cs, b, ldb, nn, K);
    const float* a = A + m * a_rs;
    c += m * ldc;
    switch (M - m) {
      case 5:
        panel_rows<5, kAccumulate>(c, ldc, a, a_rs, a_cs, b, ldb, nn, K);
        break;
      case 4:
        panel_rows<4, kAccumulate>(c, ldc, a, a_rs, a_cs, b, ldb, nn, K);
        break;
      case 3:
        panel_rows<3, kAccumulate>(c, ldc, a, a_rs, a_cs, b, ldb, nn, K);
        break;
      case 2:
        panel_rows<2, kAccumulate>(c, ldc, a, a_rs, a_cs, b, ldb, nn, K);
        break;
      case 1:
        panel_rows<1, kAccumulate>(c, ldc, a, a_rs, a_cs, b, ldb, nn, K);
        break;
      default:
        break;
    }
  }
}

void tile_gemm(float* C, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
               int64_t ldb, int M, int N, int K, bool accumulate) {
  if (accumulate)
    tile_gemm_impl<true>(C, ldc, A, a_rs, a_cs, B, ldb, M, N, K);
  else
    tile_gemm_impl<false>(C, ldc, A, a_rs, a_cs, B, ldb, M, N, K);
}

// ---------------------------------------------------------------------------------------------
// Dropout mask: Philox4x32-10 on 16 counters at once (the scalar philox4x32 in core/philox.h,
// lane-parallel), 64 consecutive columns of one row.

// High 32 bits of the 32x32-bit products, per lane. (The maskz forms with full masks compile to
// the plain instructions; GCC 12's unmasked wrappers trip -Wuninitialized, GCC bug 105593.)
inline __m512i mulhi_epu32(__m512i a, __m512i b) {
  constexpr __mmask8 kAll = 0xFF;
  const __m512i even = _mm512_maskz_srli_epi64(kAll, _mm512_maskz_mul_epu32(kAll, a, b), 32);
  const __m512i odd = _mm512_maskz_mul_epu32(kAll, _mm512_maskz_srli_epi64(kAll, a, 32),
                                             _mm512_maskz_srli_epi64(kAll, b, 32));
  return _mm512_mask_blend_epi32(static_cast<__mmask16>(0xAAAA), even, odd);
}

// Bit c is set iff element (row, col0 + c), c < 64, is kept: uniform(key, row, col) >= p with
// uniform = lane col % 4 of philox_block(key, row, col / 4). col0 % 4 == 0, col0 / 4 + 15 < 2^32.
uint64_t keep_bits(PhiloxKey key, uint64_t row, uint64_t col0, float p) {
  const __m512i mul0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i mul1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  const uint64_t col4 = col0 / 4;
  __m512i c0 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(row)));
  __m512i c1 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(row >> 32)));
  __m512i c2 =
      _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(col4))),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(col4 >> 32)));
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    const __m512i hi0 = mulhi_epu32(c0, mul0), lo0 = _mm512_mullo_epi32(c0, mul0);
    const __m512i hi1 = mulhi_epu32(c2, mul1), lo1 = _mm512_mullo_epi32(c2, mul1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
    c1 = lo1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // Same float as uint_to_unit_float: 24 bits times 2^-24 is exact.
  const __m512 vp = _mm512_set1_ps(p);
  const __m512 unit = _mm512_set1_ps(1.0f / 16777216.0f);
  const __m512i words[4] = {c0, c1, c2, c3};
  uint64_t keep = 0;
  for (int w = 0; w < 4; ++w) {
    const __m512i bits = _mm512_maskz_srli_epi32(static_cast<__mmask16>(0xFFFF), words[w], 8);
    const __m512 u =
        _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), bits), unit);
    const uint64_t lanes = _mm512_cmp_ps_mask(u, vp, _CMP_GE_OQ);
    // Lane l of word w is column 4 l + w.
    keep |= _pdep_u64(lanes, 0x1111111111111111ull << w);
  }
  return keep;
}

// ---------------------------------------------------------------------------------------------
// Loads into fp32 tiles.

// dst (rows x cols, ld_dst) = src (rows x cols, ld_src) * mul.
template <typename T>
void load_tile(float* dst, int64_t ld_dst, const T* src, int64_t ld_src, int rows, int cols,
               float mul) {
  for (int r = 0; r < rows; ++r) {
    const T* s = src + r * ld_src;
    float* d = dst + r * ld_dst;
    for (int c = 0; c < cols; ++c) d[c] = to_f32(s[c]) * mul;
  }
}

// dst (cols x rows, ld_dst) = src (rows x cols, ld_src)^T.
template <typename T>
void load_tile_transposed(float* dst, int64_t ld_dst, const T* src, int64_t ld_src, int rows,
                          int cols) {
  for (int r = 0; r < rows; ++r) {
    const T* s = src + r * ld_src;
    for (int c = 0; c < cols; ++c) dst[c * ld_dst + r] = to_f32(s[c]);
  }
}

// dst (rows x cols, ld_dst) = src * mul, rounded to T.
template <typename T>
void store_tile(T* dst, int64_t ld_dst, const float* src, int64_t ld_src, int rows, int cols,
                float mul) {
  for (int r = 0; r < rows; ++r) {
    const float* s = src + r * ld_src;
    T* d = dst + r * ld_dst;
    for (int c = 0; c < cols; ++c) d[c] = from_f32<T>(s[c] * mul);
  }
}

// Everything a task needs to locate heads in the packed buffers.
struct Geometry {
  int64_t B, T;
  int NH, KV, HD;
  int64_t width;    // (NH + 2 KV) HD: elements per token of qkv
  int64_t ldh;      // leading dimension of fp32 head tiles (HD rounded up to 16)
  int64_t nblocks;  // ceil(T / kBlock)
  float scale;      // 1 / sqrt(HD)
  int group() const { return NH / KV; }
  int64_t q_col(int h) const { return int64_t{h} * HD; }
  int64_t k_col(int h) const { return (int64_t{NH} + h / group()) * HD; }
  int64_t v_col(int h) const { return (int64_t{NH} + KV + h / group()) * HD; }
};

Geometry make_geometry(int64_t B, int64_t T, int NH, int KV, int HD, const AttentionDropout& d) {
  TESSERA_CHECK(B >= 0 && T >= 0 && NH > 0 && KV > 0 && HD > 0);
  TESSERA_CHECK_MSG(NH % KV == 0, "attention: NH must be a multiple of KV");
  TESSERA_CHECK_MSG(d.p >= 0.0f && d.p < 1.0f, "attention: dropout p must be in [0, 1)");
  // Philox counters carry the column / 4 in 32 bits; keep_bits adds up to 15 to it.
  TESSERA_CHECK(T < (int64_t{1} << 33));
  Geometry g;
  g.B = B;
  g.T = T;
  g.NH = NH;
  g.KV = KV;
  g.HD = HD;
  g.width = (int64_t{NH} + 2 * KV) * HD;
  g.ldh = round_up16(HD);
  g.nblocks = (T + kBlock - 1) / kBlock;
  g.scale = 1.0f / std::sqrt(static_cast<float>(HD));
  return g;
}

// Global dropout row of (sample b, head h, query 0); query q adds q.
uint64_t dropout_row_base(const AttentionDropout& d, const Geometry& g, int64_t b, int h) {
  const int64_t heads = d.num_heads_global > 0 ? d.num_heads_global : g.NH;
  return static_cast<uint64_t>(((d.sample_offset + b) * heads + d.head_offset + h) * g.T);
}

// ---------------------------------------------------------------------------------------------
// Forward.

struct ForwardTiles {
  explicit ForwardTiles(const Geometry& g)
      : q(kBlock * g.ldh),
        kt(g.ldh * kBlock),
        v(kBlock * g.ldh),
        s(kBlock * kBlock),
        o(kBlock * g.ldh) {}
  Scratch q;   // (Br, ldh) queries of the block, pre-multiplied by scale
  Scratch kt;  // (HD, Bc) keys of the key block, transposed
  Scratch v;   // (Bc, ldh) values of the key block
  Scratch s;   // (Br, Bc) scores, then probabilities
  Scratch o;   // (Br, ldh) output accumulator
  float m[kBlock], l[kBlock];
};

// Online-softmax step for one row: s holds n valid scores (n >= 1) of a 64-wide row. Replaces
// the row by exp(s - m_new) (zero beyond n; dropped and rescaled when keep_scale > 0), updates
// the running max m and sum l (the sum is taken before dropout, as FlashAttention does) and
// returns exp(m_old - m_new), the factor for the row's output accumulator.
inline float softmax_row_step(float* s, int n, float& m, float& l, uint64_t keep,
                              float keep_scale) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 vmax = neg_inf;
  for (int v = 0; v < 4; ++v)
    vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(neg_inf, lane_mask(n - 16 * v), s + 16 * v));
  const float m_new = std::max(m, _mm512_reduce_max_ps(vmax));
  const float alpha = std::exp(m - m_new);  // m = -inf on the first block gives 0
  const __m512 vm = _mm512_set1_ps(m_new);
  __m512 vsum = _mm512_setzero_ps();
  for (int v = 0; v < 4; ++v) {
    const __mmask16 mk = lane_mask(n - 16 * v);
    const __m512 x = _mm512_maskz_loadu_ps(mk, s + 16 * v);
    __m512 p = _mm512_maskz_mov_ps(mk, fast_exp_ps(_mm512_sub_ps(x, vm)));
    vsum = _mm512_add_ps(vsum, p);
    if (keep_scale > 0.0f)
      p = _mm512_maskz_mul_ps(static_cast<__mmask16>(keep >> (16 * v)), p,
                              _mm512_set1_ps(keep_scale));
    _mm512_storeu_ps(s + 16 * v, p);
  }
  l = l * alpha + _mm512_reduce_add_ps(vsum);
  m = m_new;
  return alpha;
}

template <typename T>
void forward_block(T* out, float* lse, const T* qkv, const Geometry& g,
                   const AttentionDropout& dropout, int64_t b, int h, int64_t i, ForwardTiles& w) {
  const int64_t q0 = i * kBlock;
  const int M = static_cast<int>(std::min<int64_t>(kBlock, g.T - q0));
  const T* tok = qkv + b * g.T * g.width;  // token 0 of sample b
  load_tile(w.q.get(), g.ldh, tok + q0 * g.width + g.q_col(h), g.width, M, g.HD, g.scale);
  std::fill(w.o.get(), w.o.get() + kBlock * g.ldh, 0.0f);
  std::fill(w.m, w.m + kBlock, -std::numeric_limits<float>::infinity());
  std::fill(w.l, w.l + kBlock, 0.0f);
  const bool drop = dropout.p > 0.0f;
  const float keep_scale = drop ? 1.0f / (1.0f - dropout.p) : 0.0f;
  const uint64_t row_base = drop ? dropout_row_base(dropout, g, b, h) : 0;

  for (int64_t j = 0; j <= i; ++j) {
    const int64_t k0 = j * kBlock;
    const int N = static_cast<int>(std::min<int64_t>(kBlock, g.T - k0));
    load_tile_transposed(w.kt.get(), kBlock, tok + k0 * g.width + g.k_col(h), g.width, N, g.HD);
    load_tile(w.v.get(), g.ldh, tok + k0 * g.width + g.v_col(h), g.width, N, g.HD, 1.0f);
    tile_gemm(w.s.get(), kBlock, w.q.get(), g.ldh, 1, w.kt.get(), kBlock, M, N, g.HD, false);
    for (int r = 0; r < M; ++r) {
      // On the diagonal block (k0 == q0) row r sees keys 0..r only.
      const int n = j == i ? r + 1 : N;
      const uint64_t keep = drop ? keep_bits(dropout.key, row_base + q0 + r, k0, dropout.p) : 0;
      const float alpha =
          softmax_row_step(w.s.get() + r * kBlock, n, w.m[r], w.l[r], keep, keep_scale);
      if (alpha != 1.0f) {
        float* o = w.o.get() + r * g.ldh;
        for (int d = 0; d < g.HD; ++d) o[d] *= alpha;
      }
    }
    tile_gemm(w.o.get(), g.ldh, w.s.get(), kBlock, 1, w.v.get(), g.ldh, M, g.HD, N, true);
  }

  T* dst = out + (b * g.T + q0) * g.NH * g.HD + g.q_col(h);
  float* lse_row = lse + (b * g.NH + h) * g.T + q0;
  for (int r = 0; r < M; ++r) {
    store_tile(dst + r * g.NH * g.HD, 0, w.o.get() + r * g.ldh, 0, 1, g.HD, 1.0f / w.l[r]);
    lse_row[r] = w.m[r] + std::log(w.l[r]);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward.

struct BackwardTiles {
  explicit BackwardTiles(const Geometry& g)
      : q(g.T * g.ldh),
        dout(g.T * g.ldh),
        dq(g.T * g.ldh),
        delta(g.T),
        k(kBlock * g.ldh),
        kt(g.ldh * kBlock),
        vt(g.ldh * kBlock),
        dk(kBlock * g.ldh),
        dv(kBlock * g.ldh),
        p(kBlock * kBlock),
        ds(kBlock * kBlock) {}
  Scratch q;      // (T, ldh) the head's queries, pre-multiplied by scale
  Scratch dout;   // (T, ldh) the head's output gradient
  Scratch dq;     // (T, ldh) dQ accumulator (times 1/scale until written)
  Scratch delta;  // (T) rowsum(dout * out)
  Scratch k;      // (Bc, ldh) keys of the key block
  Scratch kt;     // (HD, Bc) the same, transposed
  Scratch vt;     // (HD, Bc) values of the key block, transposed
  Scratch dk;     // (Bc, ldh) dK accumulator of the key block
  Scratch dv;     // (Bc, ldh) dV accumulator of the key block
  Scratch p;      // (Br, Bc) probabilities after dropout
  Scratch ds;     // (Br, Bc) dP, then dS
};

// For one (query block, key block) tile: from S (in w.p) and dP (in w.ds) computes
// P = exp(S - lse) (causally masked), leaves P after dropout in w.p and dS = P (dP' - delta) in
// w.ds, where dP' is dP through the dropout mask.
void backward_softmax_tile(BackwardTiles& w, const float* lse, const float* delta, int M, int N,
                           bool diagonal, const AttentionDropout& dropout, uint64_t row0,
                           uint64_t col0) {
  const bool drop = dropout.p > 0.0f;
  const __m512 keep_scale = _mm512_set1_ps(drop ? 1.0f / (1.0f - dropout.p) : 1.0f);
  for (int r = 0; r < M; ++r) {
    const int n = diagonal ? r + 1 : N;
    const uint64_t keep = drop ? keep_bits(dropout.key, row0 + r, col0, dropout.p) : ~0ull;
    const __m512 vlse = _mm512_set1_ps(lse[r]);
    const __m512 vdelta = _mm512_set1_ps(delta[r]);
    float* p_row = w.p.get() + r * kBlock;
    float* ds_row = w.ds.get() + r * kBlock;
    for (int v = 0; v < 4; ++v) {
      const __mmask16 mk = lane_mask(n - 16 * v);
      const __mmask16 kept = mk & static_cast<__mmask16>(keep >> (16 * v));
      const __m512 s = _mm512_maskz_loadu_ps(mk, p_row + 16 * v);
      const __m512 p = _mm512_maskz_mov_ps(mk, fast_exp_ps(_mm512_sub_ps(s, vlse)));
      __m512 dp = _mm512_maskz_loadu_ps(mk, ds_row + 16 * v);
      __m512 pd = p;
      if (drop) {
        dp = _mm512_maskz_mul_ps(kept, dp, keep_scale);
        pd = _mm512_maskz_mul_ps(kept, p, keep_scale);
      }
      _mm512_storeu_ps(p_row + 16 * v, pd);
      _mm512_storeu_ps(ds_row + 16 * v, _mm512_mul_ps(p, _mm512_sub_ps(dp, vdelta)));
    }
  }
}

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

  load_tile(w.q.get(), g.ldh, tok + g.q_col(h), g.width, static_cast<int>(g.T), g.HD, g.scale);
  load_tile(w.dout.get(), g.ldh, dout_head, ldo, static_cast<int>(g.T), g.HD, 1.0f);
  std::fill(w.dq.get(), w.dq.get() + g.T * g.ldh, 0.0f);
  for (int64_t t = 0; t < g.T; ++t) {
    const float* dor = w.dout.get() + t * g.ldh;
    const T* orow = out_head + t * ldo;
    float acc = 0.0f;
    for (int d = 0; d < g.HD; ++d) acc += dor[d] * to_f32(orow[d]);
    w.delta.get()[t] = acc;
  }
  const uint64_t row_base = dropout.p > 0.0f ? dropout_row_base(dropout, g, b, h) : 0;

  for (int64_t j = 0; j < g.nblocks; ++j) {
    const int64_t k0 = j * kBlock;
    const int N = static_cast<int>(std::min<int64_t>(kBlock, g.T - k0));
    const T* krows = tok + k0 * g.width + g.k_col(h);
    const T* vrows = tok + k0 * g.width + g.v_col(h);
    load_tile(w.k.get(), g.ldh, krows, g.width, N, g.HD, 1.0f);
    load_tile_transposed(w.kt.get(), kBlock, krows, g.width, N, g.HD);
    load_tile_transposed(w.vt.get(), kBlock, vrows, g.width, N, g.HD);
    std::fill(w.dk.get(), w.dk.get() + kBlock * g.ldh, 0.0f);
    std::fill(w.dv.get(), w.dv.get() + kBlock * g.ldh, 0.0f);
    for (int64_t i = j; i < g.nblocks; ++i) {
      const int64_t q0 = i * kBlock;
      const int M = static_cast<int>(std::min<int64_t>(kBlock, g.T - q0));
      const float* qi = w.q.get() + q0 * g.ldh;
      const float* doi = w.dout.get() + q0 * g.ldh;
      // S = (scale Q) K^T and dP = dO V^T, both (M, N).
      tile_gemm(w.p.get(), kBlock, qi, g.ldh, 1, w.kt.get(), kBlock, M, N, g.HD, false);
      tile_gemm(w.ds.get(), kBlock, doi, g.ldh, 1, w.vt.get(), kBlock, M, N, g.HD, false);
      backward_softmax_tile(w, lse_head + q0, w.delta.get() + q0, M, N, i == j, dropout,
                            row_base + q0, k0);
      // dV += P^T dO; dQ += dS K; dK += dS^T (scale Q).
      tile_gemm(w.dv.get(), g.ldh, w.p.get(), 1, kBlock, doi, g.ldh, N, g.HD, M, true);
      tile_gemm(w.dq.get() + q0 * g.ldh, g.ldh, w.ds.get(), kBlock, 1, w.k.get(), g.ldh, M, g.HD, N,
                true);
      tile_gemm(w.dk.get(), g.ldh, w.ds.get(), 1, kBlock, qi, g.ldh, N, g.HD, M, true);
    }
    store_tile(dk_dst + k0 * ld_dst, ld_dst, w.dk.get(), g.ldh, N, g.HD, 1.0f);
    store_tile(dv_dst + k0 * ld_dst, ld_dst, w.dv.get(), g.ldh, N, g.HD, 1.0f);
  }
  store_tile(dq_dst, g.width, w.dq.get(), g.ldh, static_cast<int>(g.T), g.HD, g.scale);
}

}  // namespace

template <typename Float>
void attention_forward(Float* out, float* lse, const Float* qkv, int64_t B, int64_t T, int NH,
                       int KV, int HD, const AttentionDropout& dropout) {
  const Geometry g = make_geometry(B, T, NH, KV, HD, dropout);
  const int64_t tasks = B * NH * g.nblocks;
#pragma omp parallel
  {
    ForwardTiles tiles(g);
    // Query block i costs i + 1 key blocks: hand out the expensive (last) blocks first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t i = g.nblocks - 1 - task / (B * NH);
      const int64_t bh = task % (B * NH);
      forward_block(out, lse, qkv, g, dropout, bh / NH, static_cast<int>(bh % NH), i, tiles);
    }
  }
}

template <typename Float>
void attention_backward(Float* dqkv, const Float* dout, const Float* qkv, const Float* out,
                        const float* lse, int64_t B, int64_t T, int NH, int KV, int HD,
                        const AttentionDropout& dropout) {
  const Geometry g = make_geometry(B, T, NH, KV, HD, dropout);
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

template void attention_forward<float>(float*, float*, const float*, int64_t, int64_t, int, int,
                                       int, const AttentionDropout&);
template void attention_forward<bf16>(bf16*, float*, const bf16*, int64_t, int64_t, int, int, int,
                                      const AttentionDropout&);
template void attention_backward<float>(float*, const float*, const float*, const float*,
                                        const float*, int64_t, int64_t, int, int, int,
                                        const AttentionDropout&);
template void attention_backward<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const float*,
                                       int64_t, int64_t, int, int, int, const AttentionDropout&);

}  // namespace tessera::kernels
