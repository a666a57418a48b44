// Flash-style causal self-attention (contract in attention.h).
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
// rowsum(dO * O), dropout masks) is a vector over 16 queries. The tile products run on one
// AVX-512 register-blocked kernel (tile_gemm); everything is fp32 inside whatever the storage.
//
// (Longer than the usual file: the tile GEMM, the lane-parallel Philox and the 16 x 16
// transposes exist only for this kernel and are kept next to it.)

#include "tessera/kernels/attention.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/fast_exp.h"
#include "tessera/kernels/simd.h"

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
// Dropout mask: Philox4x32-10 (core/philox.h) evaluated on 16 counters at once, one per query.

// High 32 bits of the 32x32-bit products, per lane. (The maskz forms with full masks compile to
// the plain instructions; GCC 12's unmasked wrappers trip -Wuninitialized, GCC bug 105593.)
inline __m512i mulhi_epu32(__m512i a, __m512i b) {
  constexpr __mmask8 kAll = 0xFF;
  const __m512i even = _mm512_maskz_srli_epi64(kAll, _mm512_maskz_mul_epu32(kAll, a, b), 32);
  const __m512i odd = _mm512_maskz_mul_epu32(kAll, _mm512_maskz_srli_epi64(kAll, a, 32),
                                             _mm512_maskz_srli_epi64(kAll, b, 32));
  return _mm512_mask_blend_epi32(static_cast<__mmask16>(0xAAAA), even, odd);
}

// keep[c][v] bit l is set iff the probability (query q0 + 16 v + l, key k0 + c) is kept, i.e.
// uniform(key, row0 + 16 v + l, k0 + c) >= p, for queries < M and keys < N; row0 is the global
// dropout row of query q0 and k0 % 4 == 0. Lane l of one Philox call is query 16 v + l and its
// four output words are the keys 4 c4 .. 4 c4 + 3, so the masks come out already transposed.
void fill_keep(__mmask16 (*keep)[4], PhiloxKey key, uint64_t row0, uint64_t k0, int M, int N,
               float p) {
  const __m512i mul0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i mul1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  const __m512 vp = _mm512_set1_ps(p);
  const __m512 unit = _mm512_set1_ps(1.0f / 16777216.0f);
  constexpr __mmask16 kAll = 0xFFFF;
  for (int v = 0; 16 * v < M; ++v) {
    alignas(64) uint32_t row_lo[16], row_hi[16];
    for (int l = 0; l < 16; ++l) {
      const uint64_t row = row0 + 16 * v + l;
      row_lo[l] = static_cast<uint32_t>(row);
      row_hi[l] = static_cast<uint32_t>(row >> 32);
    }
    const __m512i r_lo = _mm512_load_si512(row_lo), r_hi = _mm512_load_si512(row_hi);
    for (int c4 = 0; 4 * c4 < N; ++c4) {
      const uint64_t col4 = k0 / 4 + c4;
      __m512i c0 = r_lo, c1 = r_hi;
      __m512i c2 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(col4)));
      __m512i c3 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(col4 >> 32)));
      uint32_t key0 = key.k0, key1 = key.k1;
      for (int round = 0; round < 10; ++round) {
        const __m512i hi0 = mulhi_epu32(c0, mul0), lo0 = _mm512_mullo_epi32(c0, mul0);
        const __m512i hi1 = mulhi_epu32(c2, mul1), lo1 = _mm512_mullo_epi32(c2, mul1);
        c0 = _mm512_ternarylogic_epi32(hi1, c1, _mm512_set1_epi32(static_cast<int>(key0)), 0x96);
        c1 = lo1;
        c2 = _mm512_ternarylogic_epi32(hi0, c3, _mm512_set1_epi32(static_cast<int>(key1)), 0x96);
        c3 = lo0;
        key0 += 0x9E3779B9u;
        key1 += 0xBB67AE85u;
      }
      // Same float as uint_to_unit_float: 24 bits times 2^-24 is exact.
      const __m512i words[4] = {c0, c1, c2, c3};
      for (int w = 0; w < 4; ++w) {
        const __m512i bits = _mm512_maskz_srli_epi32(kAll, words[w], 8);
        const __m512 u = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, bits), unit);
        keep[4 * c4 + w][v] = _mm512_cmp_ps_mask(u, vp, _CMP_GE_OQ);
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
  for (size_t byte = 0; byte < cols * sizeof(T); byte += 64) _mm_prefetch(p + byte, _MM_HINT_T0);
}

// 16 lanes as fp32; lanes outside m read 0 and touch no memory.
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const bf16* p, __mmask16 m) {
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512i x = _mm512_maskz_cvtepu16_epi32(kAll, _mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, x, 16));
}

inline __m512 load16(const fp16* p, __mmask16 m) { return simd::load16(p, m); }

// dst (rows x cols, ld_dst) = src (rows x cols, ld_src) * mul.
template <typename T>
void load_tile(float* dst, int64_t ld_dst, const T* src, int64_t ld_src, int64_t rows, int cols,
               float mul) {
  const __m512 vmul = _mm512_set1_ps(mul);
  for (int64_t r = 0; r < rows; ++r) {
    if (r + kPrefetchRows < rows) prefetch_row(src + (r + kPrefetchRows) * ld_src, cols);
    for (int c = 0; c < cols; c += 16) {
      const __mmask16 m = lane_mask(cols - c);
      _mm512_mask_storeu_ps(dst + r * ld_dst + c, m,
                            _mm512_mul_ps(load16(src + r * ld_src + c, m), vmul));
    }
  }
}

// Transposes 16 rows of 16 lanes in registers (unpack within 128-bit lanes, then 128-bit
// shuffles), the usual 64-shuffle sequence.
inline void transpose16(__m512 (&x)[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    x[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    x[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    x[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    x[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      t[8 * i + k] = _mm512_shuffle_f32x4(x[8 * i + k], x[8 * i + 4 + k], 0x88);
      t[8 * i + 4 + k] = _mm512_shuffle_f32x4(x[8 * i + k], x[8 * i + 4 + k], 0xDD);
    }
  }
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    x[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
    x[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xDD);
  }
}

// dst (cols x rows, ld_dst) = mul * src (rows x cols, ld_src)^T, 16 x 16 blocks at a time.
template <typename T>
void load_tile_transposed(float* dst, int64_t ld_dst, const T* src, int64_t ld_src, int64_t rows,
                          int cols, float mul) {
  const __m512 vmul = _mm512_set1_ps(mul);
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int nr = static_cast<int>(std::min<int64_t>(16, rows - r0));
    for (int64_t r = r0 + 16; r < std::min(rows, r0 + 32); ++r)
      prefetch_row(src + r * ld_src, cols);
    for (int c0 = 0; c0 < cols; c0 += 16) {
      const int nc = std::min(16, cols - c0);
      __m512 x[16];
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k)
        x[k] = k < nr ? _mm512_mul_ps(load16(src + (r0 + k) * ld_src + c0, lane_mask(nc)), vmul)
                      : _mm512_setzero_ps();
      transpose16(x);
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k)
        if (k < nc) _mm512_mask_storeu_ps(dst + (c0 + k) * ld_dst + r0, lane_mask(nr), x[k]);
    }
  }
}

// Stores 16 lanes (those in m) rounded to the storage type; bf16 rounds to nearest even and
// keeps NaN a NaN, bit for bit as bf16::from_float.
inline void store16(float* p, __mmask16 m, __m512 x) { _mm512_mask_storeu_ps(p, m, x); }
inline void store16(bf16* p, __mmask16 m, __m512 x) {
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_maskz_srli_epi32(
      kAll, _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i nan =
      _mm512_or_si512(_mm512_maskz_srli_epi32(kAll, u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512i bits = _mm512_mask_blend_epi32(is_nan, rounded, nan);
  _mm256_mask_storeu_epi16(p, m, _mm512_maskz_cvtepi32_epi16(kAll, bits));
}

inline void store16(fp16* p, __mmask16 m, __m512 x) { simd::store16(p, x, m); }

// dst (rows x cols, ld_dst) = src * mul, rounded to T.
template <typename T>
void store_tile(T* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int cols,
                float mul) {
  const __m512 vmul = _mm512_set1_ps(mul);
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < cols; c += 16) {
      const __mmask16 m = lane_mask(cols - c);
      store16(dst + r * ld_dst + c, m,
              _mm512_mul_ps(_mm512_maskz_loadu_ps(m, src + r * ld_src + c), vmul));
    }
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
inline __mmask16 visible(int c, int v, int M, bool diagonal) {
  const __mmask16 in_range = lane_mask(M - 16 * v);
  const int first = diagonal ? c - 16 * v : 0;
  if (first <= 0) return in_range;
  if (first >= 16) return 0;
  return static_cast<__mmask16>(in_range & (0xFFFFu << first));
}

// Document masking (--reset-attention-mask): the first visible key of each query of a block, a
// vector per 16 queries. Without doc_start every key passes.
struct DocMask {
  const int32_t* ds = nullptr;  // doc_start of query q0 of the block, or nullptr
  int64_t k0 = 0;               // index of key 0 of the block
  __m512i first[kBlock / 16];
  void load(int M) {
    if (ds == nullptr) return;
    for (int v = 0; 16 * v < M; ++v)
      first[v] = _mm512_maskz_loadu_epi32(lane_mask(M - 16 * v), ds + 16 * v);
  }
  // Lanes of query vector v that may see key c of the block: doc_start <= k0 + c.
  __mmask16 sees(int c, int v) const {
    if (ds == nullptr) return static_cast<__mmask16>(0xFFFF);
    return _mm512_cmp_epi32_mask(first[v], _mm512_set1_epi32(static_cast<int32_t>(k0 + c)),
                                 _MM_CMPINT_LE);
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
  __mmask16 keep[kBlock][4];
};

// Online-softmax step over one key block: st (N keys x Br queries) holds scores of M queries.
// Replaces them by exp(s - m_new) (zero where not visible; dropped and rescaled when
// keep_scale > 0), updates the running max and sum (the sum taken before dropout, as
// FlashAttention does) and leaves exp(m_old - m_new) in w.alpha.
void softmax_step(ForwardTiles& w, int M, int N, bool diagonal, float keep_scale,
                  const DocMask& doc) {
  float* st = w.st.get();
  for (int v = 0; 16 * v < M; ++v) {
    const __m512 m_old = _mm512_load_ps(w.m + 16 * v);
    __m512 m_new = m_old;
    for (int c = 0; c < N; ++c)
      m_new = _mm512_mask_max_ps(m_new, visible(c, v, M, diagonal) & doc.sees(c, v), m_new,
                                 _mm512_loadu_ps(st + c * kBlock + 16 * v));
    // Causal: every query sees key 0 of the block, so m_new is finite (lanes beyond M are
    // unused). With document masking a query may not have seen any key yet (m_new = -inf):
    // subtract 0 there instead, so alpha = exp(-inf) = 0 rather than exp(-inf + inf) = NaN.
    const __mmask16 seen = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
    const __m512 m_sub = _mm512_maskz_mov_ps(seen, m_new);
    const __m512 alpha = fast_exp_ps(_mm512_sub_ps(m_old, m_sub));  // exp(-inf) = 0 at start
    __m512 sum = _mm512_setzero_ps();
    for (int c = 0; c < N; ++c) {
      float* s = st + c * kBlock + 16 * v;
      const __mmask16 vis = visible(c, v, M, diagonal) & doc.sees(c, v);
      __m512 p = _mm512_maskz_mov_ps(vis, fast_exp_ps(_mm512_sub_ps(_mm512_loadu_ps(s), m_sub)));
      sum = _mm512_add_ps(sum, p);
      if (keep_scale > 0.0f) p = _mm512_maskz_mul_ps(w.keep[c][v], p, _mm512_set1_ps(keep_scale));
      _mm512_storeu_ps(s, p);
    }
    _mm512_store_ps(w.l + 16 * v, _mm512_fmadd_ps(_mm512_load_ps(w.l + 16 * v), alpha, sum));
    _mm512_store_ps(w.m + 16 * v, m_new);
    _mm512_store_ps(w.alpha + 16 * v, alpha);
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
  Scratch q;      // (T, ldh) the head's queries times scale
  Scratch qt;     // (HD, ldt) the same, transposed
  Scratch dout;   // (T, ldh) the head's output gradient
  Scratch doutt;  // (HD, ldt) the same, transposed
  Scratch dq;     // (T, ldh) dQ accumulator (divided by scale until written)
  Scratch delta;  // (T) rowsum(dout * out)
  Scratch k;      // (Bc, ldh) keys of the key block
  Scratch v;      // (Bc, ldh) values of the key block
  Scratch dk;     // (Bc, ldh) dK accumulator of the key block
  Scratch dv;     // (Bc, ldh) dV accumulator of the key block
  Scratch pt;     // (Bc, Br) probabilities after dropout, transposed
  Scratch dst;    // (Bc, Br) dP, then dS, transposed
  __mmask16 keep[kBlock][4];
};

// For one (key block, query block) tile: from S^T (in w.pt) and dP^T (in w.dst) computes
// P = exp(S - lse), leaves P after dropout in w.pt and dS = P (dP' - delta) in w.dst, where
// dP' is dP through the dropout mask; zero where a query does not see a key.
void backward_softmax_step(BackwardTiles& w, const float* lse, const float* delta, int M, int N,
                           bool diagonal, float keep_scale, const DocMask& doc) {
  const __m512 ks = _mm512_set1_ps(keep_scale);
  for (int v = 0; 16 * v < M; ++v) {
    const __mmask16 in_range = lane_mask(M - 16 * v);
    const __m512 vlse = _mm512_maskz_loadu_ps(in_range, lse + 16 * v);
    const __m512 vdelta = _mm512_maskz_loadu_ps(in_range, delta + 16 * v);
    for (int c = 0; c < N; ++c) {
      float* p_ptr = w.pt.get() + c * kBlock + 16 * v;
      float* ds_ptr = w.dst.get() + c * kBlock + 16 * v;
      const __mmask16 vis = visible(c, v, M, diagonal) & doc.sees(c, v);
      const __m512 p =
          _mm512_maskz_mov_ps(vis, fast_exp_ps(_mm512_sub_ps(_mm512_loadu_ps(p_ptr), vlse)));
      __m512 dp = _mm512_loadu_ps(ds_ptr);
      __m512 pd = p;
      if (keep_scale > 0.0f) {
        dp = _mm512_maskz_mul_ps(w.keep[c][v], dp, ks);
        pd = _mm512_maskz_mul_ps(w.keep[c][v], p, ks);
      }
      _mm512_storeu_ps(p_ptr, pd);
      _mm512_storeu_ps(ds_ptr, _mm512_mul_ps(p, _mm512_sub_ps(dp, vdelta)));
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
    __m512 acc = _mm512_setzero_ps();
    for (int d = 0; d < g.HD; d += 16) {
      const __mmask16 m = lane_mask(g.HD - d);
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, dor + d), load16(orow + d, m), acc);
    }
    w.delta.get()[t] = _mm512_reduce_add_ps(acc);
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

template void attention_forward<float>(float*, float*, const float*, int64_t, int64_t, int, int,
                                       int, const AttentionDropout&,
                                 const int32_t*);
template void attention_forward<bf16>(bf16*, float*, const bf16*, int64_t, int64_t, int, int, int,
                                      const AttentionDropout&,
                                 const int32_t*);
template void attention_backward<float>(float*, const float*, const float*, const float*,
                                        const float*, int64_t, int64_t, int, int, int,
                                        const AttentionDropout&,
                                 const int32_t*);
template void attention_backward<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const float*,
                                       int64_t, int64_t, int, int, int, const AttentionDropout&,
                                 const int32_t*);
template void attention_forward<fp16>(fp16*, float*, const fp16*, int64_t, int64_t, int, int, int,
                                      const AttentionDropout&,
                                 const int32_t*);
template void attention_backward<fp16>(fp16*, const fp16*, const fp16*, const fp16*, const float*,
                                       int64_t, int64_t, int, int, int, const AttentionDropout&,
                                 const int32_t*);

}  // namespace tessera::kernels
