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

// Rows of a query block = columns of a key block. 64 keeps the per-thread tiles (a few 16 KiB
// fp32 tiles at HD = 64) inside L1/L2 and is a whole number of register panels on every target
// (16 * kTileVecs columns: one panel of four vectors on AVX-512).
constexpr int kBlock = 64;
static_assert(kBlock % (16 * kTileVecs) == 0 && kBlock % kLanes == 0);

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

// ---------------------------------------------------------------------------------------------
// Tile products. C (M x N) = or += A (M x K) * B (K x N); B and C row-major; A's element (m, k)
// is A[m * a_rs + k * a_cs], so A can be a transposed view of a row-major tile (a_rs = 1).

// R rows by NV 16-lane vectors (16 * (NV - 1) < N <= 16 * NV): R * NV accumulators stay in
// registers, each k-step loads NV vectors of B and broadcasts R scalars of A. Only the last
// vector can be partial; with kTail its columns past N are loaded as 0 and never stored
// (counted loads and stores), without it (N = 16 * NV, the usual case) the k loop has no lane
// counts at all. (accumulate and kTail are template parameters and every loop over r, v is
// unrolled: with a run-time branch in the epilogue GCC 12 keeps acc in memory and stores all of
// it on every k-step, a 3x slowdown; a lane count in the k loop costs a compare and branch per
// vector per step.)
template <int R, int NV, bool kAccumulate, bool kTail>
void panel(float* C, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
           int64_t ldb, int N, int K) {
  const int tail = N - 16 * (NV - 1);  // lanes of the last vector
  VecF acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = zero();
  for (int k = 0; k < K; ++k) {
    VecF b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      b[v] = kTail && v == NV - 1 ? load(B + k * ldb + 16 * v, tail) : load(B + k * ldb + 16 * v);
    const float* a = A + k * a_cs;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const VecF ar = splat(a[r * a_rs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = fmadd(ar, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* c = C + r * ldc + 16 * v;
      const int n = kTail && v == NV - 1 ? tail : kLanes;
      if constexpr (kAccumulate)
        store(c, acc[r][v] + load(c, n), n);
      else
        store(c, acc[r][v], n);
    }
  }
}

// R rows of a panel at most 16 * NV columns wide: the narrowest panel that covers N. Only
// NV <= kTileVecs is ever instantiated (tile_gemm_impl never passes wider panels).
template <int R, int NV, bool kAccumulate>
void panel_rows(float* C, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
                int64_t ldb, int N, int K) {
  if constexpr (NV > 1) {
    if (N <= 16 * (NV - 1))
      return panel_rows<R, NV - 1, kAccumulate>(C, ldc, A, a_rs, a_cs, B, ldb, N, K);
  }
  if (N == 16 * NV)
    panel<R, NV, kAccumulate, false>(C, ldc, A, a_rs, a_cs, B, ldb, N, K);
  else
    panel<R, NV, kAccumulate, true>(C, ldc, A, a_rs, a_cs, B, ldb, N, K);
}

// The last `rows` (< kTileRows) rows of a column panel, as one panel of exactly that height.
template <int R, bool kAccumulate>
void tail_rows(float* C, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
               int64_t ldb, int N, int K, int rows) {
  if (rows == R) return panel_rows<R, kTileVecs, kAccumulate>(C, ldc, A, a_rs, a_cs, B, ldb, N, K);
  if constexpr (R > 1) tail_rows<R - 1, kAccumulate>(C, ldc, A, a_rs, a_cs, B, ldb, N, K, rows);
}

template <bool kAccumulate>
void tile_gemm_impl(float* C, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs,
                    const float* B, int64_t ldb, int M, int N, int K) {
  // The target's register blocking: kTileRows x kTileVecs accumulators plus kTileVecs B vectors
  // and a broadcast fill its vector registers (AVX-512: 6 x 4 + 4 + 1 of the 32 zmm).
  constexpr int kRows = kTileRows;
  constexpr int kCols = 16 * kTileVecs;
  static_assert(kRows >= 2);
  for (int n0 = 0; n0 < N; n0 += kCols) {
    const int nn = std::min(kCols, N - n0);
    float* c = C + n0;
    const float* b = B + n0;
    int m = 0;
    for (; m + kRows <= M; m += kRows)
      panel_rows<kRows, kTileVecs, kAccumulate>(c + m * ldc, ldc, A + m * a_rs, a_rs, a_cs, b, ldb,
                                                nn, K);
    if (m < M)
      tail_rows<kRows - 1, kAccumulate>(c + m * ldc, ldc, A + m * a_rs, a_rs, a_cs, b, ldb, nn, K,
                                        M - m);
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
// Dropout mask: Philox4x32-10 (core/philox.h) evaluated on 16 counters at once, one per query.

// keep[c][v] lane l is set iff the probability (query q0 + 16 v + l, key k0 + c) is kept, i.e.
// uniform(key, row0 + 16 v + l, k0 + c) >= p, for queries < M and keys < N; row0 is the global
// dropout row of query q0 and k0 % 4 == 0. Lane l of one Philox call is query 16 v + l and its
// four output words are the keys 4 c4 .. 4 c4 + 3, so the masks come out already transposed.
void fill_keep(Mask (*keep)[4], PhiloxKey key, uint64_t row0, uint64_t k0, int M, int N, float p) {
  const VecI mul0 = splat_i(static_cast<int32_t>(0xD2511F53u));
  const VecI mul1 = splat_i(static_cast<int32_t>(0xCD9E8D57u));
  const VecF vp = splat(p);
  const VecF unit = splat(1.0f / 16777216.0f);
  for (int v = 0; 16 * v < M; ++v) {
    // The 64-bit row counter of each lane, split into its 32-bit halves.
    alignas(64) int32_t row_lo[16], row_hi[16];
    for (int l = 0; l < 16; ++l) {
      const uint64_t row = row0 + 16 * v + l;
      row_lo[l] = static_cast<int32_t>(static_cast<uint32_t>(row));
      row_hi[l] = static_cast<int32_t>(static_cast<uint32_t>(row >> 32));
    }
    const VecI r_lo = load_i(row_lo, 16), r_hi = load_i(row_hi, 16);
    for (int c4 = 0; 4 * c4 < N; ++c4) {
      const uint64_t col4 = k0 / 4 + c4;
      VecI c0 = r_lo, c1 = r_hi;
      VecI c2 = splat_i(static_cast<int32_t>(static_cast<uint32_t>(col4)));
      VecI c3 = splat_i(static_cast<int32_t>(static_cast<uint32_t>(col4 >> 32)));
      uint32_t key0 = key.k0, key1 = key.k1;
      for (int round = 0; round < 10; ++round) {
        VecI hi0, lo0, hi1, lo1;
        mul_wide_u32(c0, mul0, &hi0, &lo0);
        mul_wide_u32(c2, mul1, &hi1, &lo1);
        c0 = hi1 ^ c1 ^ splat_i(static_cast<int32_t>(key0));
        c1 = lo1;
        c2 = hi0 ^ c3 ^ splat_i(static_cast<int32_t>(key1));
        c3 = lo0;
        key0 += 0x9E3779B9u;
        key1 += 0xBB67AE85u;
      }
      // Same float as uint_to_unit_float: 24 bits times 2^-24 is exact.
      const VecI words[4] = {c0, c1, c2, c3};
      for (int w = 0; w < 4; ++w) {
        const VecF u = to_float(shift_right(words[w], 8)) * unit;
        keep[4 * c4 + w][v] = cmp_ge(u, vp);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Loads into fp32 tiles.

// Rows of one head are far apart in the packed buffers, a stride the hardware prefetcher does
// not follow: loops over such rows fetch a few rows ahead.
constexpr int64_t kPrefetchRows = 8;
template <typename T>
inline void prefetch_row(const T* row, int cols) {
  const char* p = reinterpret_cast<const char*>(row);
  for (size_t byte = 0; byte < cols * sizeof(T); byte += 64) prefetch(p + byte);
}

// dst[0, n) = src[0, n) * mul, converted from / rounded to the storage types: whole vectors,
// then one counted tail (same arithmetic on every lane).
template <typename D, typename S>
inline void scale_row(D* dst, const S* src, int n, VecF mul) {
  int c = 0;
  for (; c + kLanes <= n; c += kLanes) store(dst + c, load(src + c) * mul);
  if (c < n) store(dst + c, load(src + c, n - c) * mul, n - c);
}

// dst (rows x cols, ld_dst) = src (rows x cols, ld_src) * mul.
template <typename T>
void load_tile(float* dst, int64_t ld_dst, const T* src, int64_t ld_src, int64_t rows, int cols,
               float mul) {
  const VecF vmul = splat(mul);
  for (int64_t r = 0; r < rows; ++r) {
    if (r + kPrefetchRows < rows) prefetch_row(src + (r + kPrefetchRows) * ld_src, cols);
    scale_row(dst + r * ld_dst, src + r * ld_src, cols, vmul);
  }
}

// dst (cols x rows, ld_dst) = mul * src (rows x cols, ld_src)^T, 16 x 16 blocks at a time.
template <typename T>
void load_tile_transposed(float* dst, int64_t ld_dst, const T* src, int64_t ld_src, int64_t rows,
                          int cols, float mul) {
  const VecF vmul = splat(mul);
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int nr = lanes_left(r0, rows);
    for (int64_t r = r0 + 16; r < std::min(rows, r0 + 32); ++r)
      prefetch_row(src + r * ld_src, cols);
    for (int c0 = 0; c0 < cols; c0 += 16) {
      const int nc = lanes_left(c0, cols);
      VecF x[16];
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k)
        x[k] = k < nr ? load(src + (r0 + k) * ld_src + c0, nc) * vmul : zero();
      transpose16(x);
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k)
        if (k < nc) store(dst + (c0 + k) * ld_dst + r0, x[k], nr);
    }
  }
}

// dst (rows x cols, ld_dst) = src * mul, rounded to T (store(): nearest even).
template <typename T>
void store_tile(T* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int cols,
                float mul) {
  const VecF vmul = splat(mul);
  for (int64_t r = 0; r < rows; ++r) scale_row(dst + r * ld_dst, src + r * ld_src, cols, vmul);
}

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

// Global dropout row of (sample b, head h, query 0); query q adds q.
uint64_t dropout_row_base(const AttentionDropout& d, const Geometry& g, int64_t b, int h) {
  const int64_t heads = d.num_heads_global > 0 ? d.num_heads_global : g.NH;
  return static_cast<uint64_t>(((d.sample_offset + b) * heads + d.head_offset + h) * g.T);
}

// Score tiles are held transposed, (keys, queries) with leading dimension kBlock, so every
// per-query quantity (running max, sum, lse, rowsum(dO * O)) is a vector over 16 queries and
// no tile ever needs a horizontal reduction or a per-block transpose.
//
// Lanes of query vector v that key c of a block may see: queries below M and, on the diagonal
// block (same first index for queries and keys), queries 16 v + l >= c.
inline Mask visible(int c, int v, int M, bool diagonal) {
  const Mask in_range = first_n(M - 16 * v);
  const int first = diagonal ? c - 16 * v : 0;
  if (first <= 0) return in_range;
  if (first >= 16) return from_bits(0);
  return in_range & from_bits(0xFFFFu << first);
}

// Document masking (--reset-attention-mask): the first visible key of each query of a block, a
// vector per 16 queries. Without doc_start every key passes.
struct DocMask {
  const int32_t* ds = nullptr;  // doc_start of query q0 of the block, or nullptr
  int64_t k0 = 0;               // index of key 0 of the block
  VecI first[kBlock / 16];
  void load(int M) {
    if (ds == nullptr) return;
    for (int v = 0; 16 * v < M; ++v) first[v] = load_i(ds + 16 * v, M - 16 * v);
  }
  // Lanes of query vector v that may see key c of the block: doc_start <= k0 + c.
  Mask sees(int c, int v) const {
    if (ds == nullptr) return first_n(16);
    return cmp_le_i(first[v], splat_i(static_cast<int32_t>(k0 + c)));
  }
};

// True when no query of [q0, q0 + M) sees any key before k_end (the block can be skipped).
inline bool block_hidden(const Geometry& g, int64_t b, int64_t q0, int M, int64_t k_end) {
  if (g.doc_start == nullptr) return false;
  const int32_t* ds = g.doc_start + b * g.T + q0;
  for (int r = 0; r < M; ++r)
    if (ds[r] < k_end) return false;
  return true;
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
  Scratch qt;                       // (HD, Br) queries of the block times scale, transposed
  Scratch k;                        // (T, ldh) keys of the head, as far as the task needs
  Scratch v;                        // (T, ldh) values of the head, likewise
  Scratch st;                       // (Bc, Br) scores, then probabilities, transposed
  Scratch o;                        // (Br, ldh) output accumulator
  alignas(64) float m[kBlock];      // running max per query
  alignas(64) float l[kBlock];      // running sum per query
  alignas(64) float alpha[kBlock];  // exp(m_old - m_new) of the last step
  Mask keep[kBlock][4];             // dropout keep masks of the key block (fill_keep)
};

// Online-softmax step over one key block: st (N keys x Br queries) holds scores of M queries.
// Replaces them by exp(s - m_new) (zero where not visible; dropped and rescaled when
// keep_scale > 0), updates the running max and sum (the sum taken before dropout, as
// FlashAttention does) and leaves exp(m_old - m_new) in w.alpha.
void softmax_step(ForwardTiles& w, int M, int N, bool diagonal, float keep_scale,
                  const DocMask& doc) {
  float* st = w.st.get();
  for (int v = 0; 16 * v < M; ++v) {
    const VecF m_old = load(w.m + 16 * v);
    VecF m_new = m_old;
    for (int c = 0; c < N; ++c)
      m_new = select(visible(c, v, M, diagonal) & doc.sees(c, v),
                     max(m_new, load(st + c * kBlock + 16 * v)), m_new);
    // Causal: every query sees key 0 of the block, so m_new is finite (lanes beyond M are
    // unused). With document masking a query may not have seen any key yet (m_new = -inf):
    // subtract 0 there instead, so alpha = exp(-inf) = 0 rather than exp(-inf + inf) = NaN.
    const Mask seen = cmp_neq(m_new, splat(-INFINITY));
    const VecF m_sub = zero_unless(seen, m_new);
    const VecF alpha = fast_exp(m_old - m_sub);  // exp(-inf) = 0 at start
    VecF sum = zero();
    for (int c = 0; c < N; ++c) {
      float* s = st + c * kBlock + 16 * v;
      const Mask vis = visible(c, v, M, diagonal) & doc.sees(c, v);
      VecF p = zero_unless(vis, fast_exp(load(s) - m_sub));
      sum = sum + p;
      if (keep_scale > 0.0f) p = zero_unless(w.keep[c][v], p * splat(keep_scale));
      store(s, p);
    }
    store(w.l + 16 * v, fmadd(load(w.l + 16 * v), alpha, sum));
    store(w.m + 16 * v, m_new);
    store(w.alpha + 16 * v, alpha);
  }
}

template <typename T>
void forward_block(T* out, float* lse, const T* qkv, const Geometry& g,
                   const AttentionDropout& dropout, int64_t b, int h, int64_t i, ForwardTiles& w) {
  const int64_t q0 = i * kBlock;
  const int M = static_cast<int>(std::min<int64_t>(kBlock, g.T - q0));
  const T* tok = qkv + b * g.T * g.width;  // token 0 of sample b
  load_tile_transposed(w.qt.get(), kBlock, tok + q0 * g.width + g.q_col(h), g.width, M, g.HD,
                       g.scale);
  std::fill(w.o.get(), w.o.get() + kBlock * g.ldh, 0.0f);
  std::fill(w.m, w.m + kBlock, -std::numeric_limits<float>::infinity());
  std::fill(w.l, w.l + kBlock, 0.0f);
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
    if (drop) fill_keep(w.keep, dropout.key, row0, static_cast<uint64_t>(k0), M, N, dropout.p);
    softmax_step(w, M, N, j == i, keep_scale, doc);
    for (int r = 0; r < M; ++r) {
      float* o = w.o.get() + r * g.ldh;
      for (int d = 0; d < g.HD; ++d) o[d] *= w.alpha[r];
    }
    // O (M, HD) += P V, with P (M, N) read as the transposed view of P^T.
    tile_gemm(w.o.get(), g.ldh, w.st.get(), 1, kBlock, v, g.ldh, M, g.HD, N, true);
  }

  T* dst = out + (b * g.T + q0) * g.NH * g.HD + g.q_col(h);
  float* lse_row = lse + (b * g.NH + h) * g.T + q0;
  for (int r = 0; r < M; ++r) {
    store_tile(dst + r * g.NH * g.HD, 0, w.o.get() + r * g.ldh, 0, 1, g.HD, 1.0f / w.l[r]);
    lse_row[r] = w.m[r] + std::log(w.l[r]);
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
  Scratch q;             // (T, ldh) the head's queries times scale
  Scratch qt;            // (HD, ldt) the same, transposed
  Scratch dout;          // (T, ldh) the head's output gradient
  Scratch doutt;         // (HD, ldt) the same, transposed
  Scratch dq;            // (T, ldh) dQ accumulator (divided by scale until written)
  Scratch delta;         // (T) rowsum(dout * out)
  Scratch k;             // (Bc, ldh) keys of the key block
  Scratch v;             // (Bc, ldh) values of the key block
  Scratch dk;            // (Bc, ldh) dK accumulator of the key block
  Scratch dv;            // (Bc, ldh) dV accumulator of the key block
  Scratch pt;            // (Bc, Br) probabilities after dropout, transposed
  Scratch dst;           // (Bc, Br) dP, then dS, transposed
  Mask keep[kBlock][4];  // dropout keep masks of the tile (fill_keep)
};

// For one (key block, query block) tile: from S^T (in w.pt) and dP^T (in w.dst) computes
// P = exp(S - lse), leaves P after dropout in w.pt and dS = P (dP' - delta) in w.dst, where
// dP' is dP through the dropout mask; zero where a query does not see a key.
void backward_softmax_step(BackwardTiles& w, const float* lse, const float* delta, int M, int N,
                           bool diagonal, float keep_scale, const DocMask& doc) {
  const VecF ks = splat(keep_scale);
  for (int v = 0; 16 * v < M; ++v) {
    const int in_range = M - 16 * v;  // lanes of real queries (load clamps to 16)
    const VecF vlse = load(lse + 16 * v, in_range);
    const VecF vdelta = load(delta + 16 * v, in_range);
    for (int c = 0; c < N; ++c) {
      float* p_ptr = w.pt.get() + c * kBlock + 16 * v;
      float* ds_ptr = w.dst.get() + c * kBlock + 16 * v;
      const Mask vis = visible(c, v, M, diagonal) & doc.sees(c, v);
      const VecF p = zero_unless(vis, fast_exp(load(p_ptr) - vlse));
      VecF dp = load(ds_ptr);
      VecF pd = p;
      if (keep_scale > 0.0f) {
        dp = zero_unless(w.keep[c][v], dp * ks);
        pd = zero_unless(w.keep[c][v], p * ks);
      }
      store(p_ptr, pd);
      store(ds_ptr, p * (dp - vdelta));
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
      backward_softmax_step(w, lse_head + q0, w.delta.get() + q0, M, N, i == j, keep_scale, doc);
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
                       int KV, int HD, const AttentionDropout& dropout, const int32_t* doc_start) {
  Geometry g = make_geometry(B, T, NH, KV, HD, dropout);
  if (doc_start != nullptr) {
    for (int64_t i = 0; i < B * T; ++i)
      TESSERA_CHECK_MSG(doc_start[i] >= 0 && doc_start[i] <= i % T,
                        "attention: doc_start[t] must be in [0, t]");
    g.doc_start = doc_start;
  }
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
                        const AttentionDropout& dropout, const int32_t* doc_start) {
  Geometry g = make_geometry(B, T, NH, KV, HD, dropout);
  g.doc_start = doc_start;  // checked by the forward pass that made lse
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
