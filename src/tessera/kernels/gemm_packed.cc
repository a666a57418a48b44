// Tessera's blocked GEMM (contract in gemm_packed.h), compiled once per CPU target.
//
// The loop nest of GotoBLAS / BLIS (Goto and van de Geijn, "Anatomy of High-Performance Matrix
// Multiplication", TOMS 2008; Van Zee and van de Geijn, "BLIS", TOMS 2015), written for a
// row-major C with vectors along N. For one block of C's rows and columns:
//
//   for m0 in the block's rows by kMC
//     for k0 in K by kKC
//       A block (mc x kc): packed once (or read in place), reused for every column block
//       for n0 in the block's columns by nc (L2-sized)
//         pack the B block (kc x nc) into micro-panels of kNR columns        (stays in L2)
//         for each A micro-panel of kMR rows                                 (stays in L1)
//           for each B micro-panel: micro-kernel, kMR x kNR accumulators over k = 0..kc
//
// When the thread does not pack A itself (A packed whole by the team, or an fp32 or bf16 A read
// in place), the k0 and n0 loops swap: every depth block of a column block runs before the next
// column block, so that block of C stays in cache (gemm_block).
//
// Threads (gemm_parallel): C is cut into column blocks (or row blocks), two per thread, taken
// from a dynamic schedule, so a core that runs slower (a shared machine, a VM's other tenant) does
// not hold the team up by more than half a block. Every column block needs all of A:
// the team packs A once, whole, before (nothing to pack for an A read in place), and every
// row block needs all of B, packed once likewise; an operand too large for that budget makes each
// thread take one contiguous block and pack its own.
//
// Packing is where 16-bit operands are widened: a bf16 or fp16 element is read once, as 2
// bytes, into the fp32 panel the micro-kernel reads anyway, so a 16-bit product costs what an
// fp32 product does, without a separate widening pass over its operands and output (which is
// what the widened path, gemm_widened.h, pays). An fp32 or bf16 A that is not transposed is not
// packed: the micro-kernel broadcasts from its rows in place (a bf16 value widened by a shift,
// simd splat_bf16), so such an A costs no packing pass, no team barrier before the products and
// no widened copy in scratch (not measurably faster at AVX2, docs/performance.md).
//
// Summation order (gemm_packed.h): the blocking never changes which products are summed in
// which order, so the tiles, blocks and threads above change speed, not bits.

#include "tessera/kernels/gemm_packed.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/cpu_target.h"
#include "tessera/kernels/scratch.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

// Register blocking of the target (simd/vec_*.h): kMR rows by kNV 16-lane vectors.
constexpr int kMR = kGemmRows;
constexpr int kNV = kGemmVecs;
constexpr int kNR = 16 * kNV;
static_assert(kMR <= 16, "pack_a_kmajor writes one 16-lane vector per k");
// Depth of a block (gemm_packed.h): it fixes the summation order, so it is the same on every
// target. The model's products (K = 768 ... 3072) ran fastest at 384-512 on AVX-512 and AVX2,
// against 256 (docs/performance.md); a B micro-panel (kKC x kNR) then streams from L2 per
// micro-tile while an A micro-panel (kMR x kKC, 18 KiB at kMR = 12) stays in L1.
constexpr int kKC = kPackedGemmDepth;
// Rows of an A block: kMC x kKC fp32 is 6 MiB at most, read from L3 once per column block.
constexpr int kMC = (4096 / kMR) * kMR;

// Products of at most this many multiply-adds run on the calling thread alone: a fork/join
// costs about as much as it saves below ~4 MFLOP.
constexpr int64_t kSerialMacs = int64_t{128} * 128 * 128;

// Columns of a packed B block: kKC x nc fp32 fills half of the core's L2 (the rest holds the C
// tiles and the A micro-panels passing through), a whole number of micro-panels.
int b_block_columns() {
  static const int columns = [] {
    const int64_t per_column = int64_t{kKC} * sizeof(float);
    const int64_t fit = l2_cache_bytes() / 2 / per_column;
    return static_cast<int>(std::clamp<int64_t>(fit / kNR, 1, 64) * kNR);
  }();
  return columns;
}

// Floats of the A block a thread packs itself for `rows` rows of C (gemm_block's a_buf).
int64_t a_block_floats(int64_t rows, int64_t K) {
  return std::min<int64_t>(kMC, (rows + kMR - 1) / kMR * kMR) * std::min<int64_t>(kKC, K);
}

// Floats of the B block a thread packs itself (gemm_block's b_buf): one L2-sized block of
// columns, whatever N.
int64_t b_block_floats(int64_t K) { return std::min<int64_t>(kKC, K) * b_block_columns(); }

// ---- micro-kernel ----------------------------------------------------------------------------

// Where the micro-kernel reads element (r, k) of an A micro-panel.
enum class ALayout {
  kRows,    // a[r * a_rs + k]: A's own rows (fp32 or bf16, not transposed) or fp16 rows widened
  kKMajor,  // a[k * kMR + r]: packed k-major, kMR values per k (A transposed)
};

// tile (R x kNR, row stride kNR) = A (R x kc) * B (kc x kNR), B a packed micro-panel of kNR
// floats per k. R * kNV accumulators stay in registers; each k loads kNV vectors of B and
// broadcasts R values of A. Every loop over r and v is unrolled: the accumulators must be
// registers, not an array in memory. The tile goes to a buffer, not to C: the epilogue's
// run-time choices (dtype, beta, depth block) would otherwise be branches around the k loop.
//
// A is fp32 (packed, or rows in place) or bf16 rows in place (TA). A bf16 value is broadcast
// from a 32-bit load of it and its successor, shifted (simd splat_bf16), instead of a packing
// pass widening A first; the last depth, whose successor may lie past A, is read alone.
template <int R, ALayout kLayout, typename TA>
void micro_kernel(float* tile, const TA* a, int64_t a_rs, const float* b, int kc) {
  static_assert(std::is_same_v<TA, float> ||
                (std::is_same_v<TA, bf16> && kLayout == ALayout::kRows));
  VecF acc[R][kNV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[r][v] = zero();
  // Depth k, A's values from a_at(r).
  const auto step = [&](int k, auto a_at) {
    VecF bv[kNV];
    // B's micro-panel streams from L2 (kNV lines per k) and a k-major A panel from L2 or L3 on
    // its first tile: asked for ahead of use, as the hardware prefetcher alone was late (one A/B
    // run of bench/gemm_bench at AVX2, 1 thread, 2026-12-02: dgrad_fc 92 -> 99 GFLOP/s with the
    // B prefetch, wgrad_fc 91 -> 98 with the A one; oneDNN's sgemm 98-100 in the run). One line
    // of B per k: at AVX-512 (kNV = 2) prefetching both measured no different. The addresses
    // run past the panels' ends on the last k; prefetch_ahead forms them without pointer
    // arithmetic outside the buffer.
    prefetch_ahead(b, (k + 8) * kNR);
    if constexpr (kLayout == ALayout::kKMajor) prefetch_ahead(a, (k + 16) * kMR);
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) bv[v] = load(b + k * kNR + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const VecF ar = a_at(r);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[r][v] = fmadd(ar, bv[v], acc[r][v]);
    }
  };
  if constexpr (std::is_same_v<TA, bf16>) {
#pragma GCC unroll 4
    for (int k = 0; k + 1 < kc; ++k) step(k, [&](int r) { return splat_bf16(a + r * a_rs + k); });
    // The last depth: its pair would reach past the row (past A, on A's last row).
    step(kc - 1, [&](int r) { return splat(static_cast<float>(a[r * a_rs + kc - 1])); });
  } else {
#pragma GCC unroll 4
    for (int k = 0; k < kc; ++k)
      step(k, [&](int r) {
        return splat(kLayout == ALayout::kRows ? a[r * a_rs + k] : a[k * kMR + r]);
      });
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) store(tile + r * kNR + 16 * v, acc[r][v]);
}

// The micro-kernel for `rows` <= R rows of A's rows (in place, or fp16 widened by packing): fewer
// than kMR in the last rows of a product (packed k-major panels are zero-padded to kMR instead).
template <int R, typename TA>
void micro_kernel_rows(int rows, float* tile, const TA* a, int64_t a_rs, const float* b, int kc) {
  if (rows == R) return micro_kernel<R, ALayout::kRows>(tile, a, a_rs, b, kc);
  if constexpr (R > 1) micro_kernel_rows<R - 1>(rows, tile, a, a_rs, b, kc);
}

// ---- epilogue --------------------------------------------------------------------------------

struct Epilogue {
  float alpha, beta;
  bool first;  // the first depth block: beta applies (beta == 0: C is not read)
  bool last;   // the last depth block: a 16-bit C is written from its fp32 partial sum
};

// A tile (rows x cols of it) into C at c (row stride ldc). fp32 C: alpha tile + beta C on the
// first depth block, += alpha tile on the others. 16-bit C (beta 0): rounded from alpha tile
// when there is one depth block; with several, the fp32 partial P (at p, row stride ldp) holds
// the running sum and the last block rounds P + alpha tile into C.
template <typename TC>
void store_tile(const float* tile, int rows, int cols, TC* c, int64_t ldc, float* p, int64_t ldp,
                const Epilogue& e) {
  const VecF alpha = splat(e.alpha), beta = splat(e.beta);
  for (int r = 0; r < rows; ++r) {
    const float* t = tile + r * kNR;
    TC* cr = c + r * ldc;
    float* pr = p == nullptr ? nullptr : p + r * ldp;
    for_each_block(0, cols, [&](int64_t j, int n) {
      VecF x = alpha * load(t + j);
      if constexpr (std::is_same_v<TC, float>) {
        if (!e.first)
          x = load(cr + j, n) + x;
        else if (e.beta != 0.0f)
          x = fmadd(beta, load(cr + j, n), x);
        store(cr + j, x, n);
      } else {
        if (!e.first) x = load(pr + j, n) + x;
        if (e.last)
          store(cr + j, x, n);
        else
          store(pr + j, x, n);
      }
    });
  }
}

// Asks for the lines of a rows x cols block of T (row stride ld) to be brought into cache: issued
// for the C tile (and partial sums) before the micro-kernel, whose ~kMR * kNV * kc fused
// multiply-adds hide their latency from the epilogue (measured: without it the epilogue's
// first loads of C missed the caches, ~10% of a 16-bit product's time on AVX2).
template <typename T>
void prefetch_block(const T* p, int64_t ld, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const char* begin = reinterpret_cast<const char*>(p + r * ld);
    const char* end = reinterpret_cast<const char*>(p + r * ld + cols);
    for (const char* line = begin; line < end; line += 64) prefetch(line);
    prefetch(end - 1);
  }
}

// ---- packing ---------------------------------------------------------------------------------

// A not transposed (row r at a + r * lda): rows [0, rows) x depth [0, kc), widened into rows of
// kc floats.
template <typename TA>
void pack_a_rows(float* out, const TA* a, int64_t lda, int rows, int kc) {
  for (int r = 0; r < rows; ++r)
    for_each_block(0, kc,
                   [&](int64_t k, int n) { store(out + r * kc + k, load(a + r * lda + k, n), n); });
}

// A transposed (element (m, k) at a[k * lda + m], M rows in all): the k-major micro-panels of
// rows [m_begin, m_end) (multiples of kMR, bar the last at M) and depth [0, kc), the panel of
// row m at out + (m - m_begin) * kc, rows past M zero. k is the outer loop, so each of A's rows
// is read front to back once for all the panels (one panel at a time reads kc rows for kMR
// values each, and measured 3% of a weight-gradient product at AVX2). While a whole 16-lane
// vector fits in its panel, each store writes one (the lanes past kMR are overwritten at the
// next k); the last k store kMR lanes, so nothing outside the panels is written.
template <typename TA>
void pack_a_kmajor(float* out, const TA* a, int64_t lda, int64_t M, int64_t m_begin, int64_t m_end,
                   int kc) {
  const int whole = std::max(0, kc - (16 - kMR + kMR - 1) / kMR);  // k * kMR + 16 <= kc * kMR
  for (int k = 0; k < kc; ++k) {
    const TA* row = a + k * lda;
    for (int64_t m = m_begin; m < m_end; m += kMR) {
      float* dst = out + (m - m_begin) * kc + k * kMR;
      const int rows = static_cast<int>(std::min<int64_t>(kMR, M - m));
      if (k < whole && m + 16 <= M)
        store(dst, load(row + m));
      else
        store(dst, load(row + m, rows), kMR);
    }
  }
}

// B not transposed (element (k, n) at b[k * ldb + n]): depth [0, kc) x columns [0, cols) as one
// micro-panel of kNR floats per k, columns past `cols` zero.
template <typename TB>
void pack_b_rows(float* out, const TB* b, int64_t ldb, int kc, int cols) {
  if (cols == kNR) {
    for (int k = 0; k < kc; ++k)
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) store(out + k * kNR + 16 * v, load(b + k * ldb + 16 * v));
    return;
  }
  for (int k = 0; k < kc; ++k)
    for (int v = 0; v < kNV; ++v) {
      const int n = std::clamp(cols - 16 * v, 0, 16);
      store(out + k * kNR + 16 * v, load(b + k * ldb + 16 * v, n));
    }
}

// B transposed (element (k, n) at b[n * ldb + k]): the same micro-panel, 16 x 16 blocks at a
// time through a register transpose.
template <typename TB>
void pack_b_transposed(float* out, const TB* b, int64_t ldb, int kc, int cols) {
  for (int v = 0; v < kNV; ++v) {
    const int n_rows = std::clamp(cols - 16 * v, 0, 16);
    for (int k0 = 0; k0 < kc; k0 += 16) {
      const int nk = std::min(16, kc - k0);
      VecF x[16];
      for (int i = 0; i < 16; ++i) {
        const TB* row = b + (16 * v + i) * ldb + k0;
        x[i] = i >= n_rows ? zero() : nk == 16 ? load(row) : load(row, nk);
      }
      transpose16(x);
      for (int i = 0; i < nk; ++i) store(out + (k0 + i) * kNR + 16 * v, x[i]);
    }
  }
}

// ---- the loop nest ---------------------------------------------------------------------------

template <typename TA, typename TB, typename TC>
struct Product {
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha, beta;
  const TA* A;
  int64_t lda;
  const TB* B;
  int64_t ldb;
  TC* C;
  int64_t ldc;
  float* partial;  // fp32 partial sums of a 16-bit C (row stride N) when K > kKC, else null
  // A is packed (transposed, or fp16 widened) rather than read in place: the micro-kernel
  // broadcasts from an fp32 or bf16 A's own rows.
  bool packs_a() const { return packed_gemm_packs_a(trans_a, std::is_same_v<TA, fp16>); }
  // Rows and columns rounded up to whole micro-panels.
  int64_t m_padded() const { return (M + kMR - 1) / kMR * kMR; }
  int64_t n_padded() const { return (N + kNR - 1) / kNR * kNR; }
};

// Micro-panels of A packed together by pack_a_panels (a transposed A) and by the team's shared
// packing (gemm_parallel).
constexpr int64_t kPanelsPerRun = 16;

// Packs A's micro-panels of rows [m_begin, m_end) (multiples of kMR, bar M) at depth
// [k0, k0 + kc): the panel of row m at out + (m - m_begin) * kc (kMR x kc floats).
template <typename TA, typename TB, typename TC>
void pack_a_panels(const Product<TA, TB, TC>& g, float* out, int64_t m_begin, int64_t m_end,
                   int64_t k0, int kc) {
  if (g.trans_a) {
    // In runs of kPanelsPerRun panels: a run's kc x kPanelsPerRun * kMR floats stay in L2 while
    // pack_a_kmajor writes a value into each of its panels per k (across a thread's whole block,
    // up to 4092 rows, each k's writes would land on hundreds of pages).
    for (int64_t m = m_begin; m < m_end; m += kPanelsPerRun * kMR)
      pack_a_kmajor(out + (m - m_begin) * kc, g.A + k0 * g.lda, g.lda, g.M, m,
                    std::min(m_end, m + kPanelsPerRun * kMR), kc);
    return;
  }
  for (int64_t m = m_begin; m < m_end; m += kMR) {
    const int rows = static_cast<int>(std::min<int64_t>(kMR, g.M - m));
    pack_a_rows(out + (m - m_begin) * kc, g.A + m * g.lda + k0, g.lda, rows, kc);
  }
}

// Packs B's micro-panel of columns [n, n + kNR) at depth [k0, k0 + kc) to out (kc x kNR floats).
template <typename TA, typename TB, typename TC>
void pack_b_panel(const Product<TA, TB, TC>& g, float* out, int64_t n, int64_t k0, int kc) {
  const int cols = static_cast<int>(std::min<int64_t>(kNR, g.N - n));
  if (g.trans_b)
    pack_b_transposed(out, g.B + n * g.ldb + k0, g.ldb, kc, cols);
  else
    pack_b_rows(out, g.B + k0 * g.ldb + n, g.ldb, kc, cols);
}

// An operand packed whole, for all of K, and shared by the threads: the micro-panel at row (or
// column) offset i of the depth block starting at k0 (depth kc) is at data + k0 * padded + i * kc.
struct SharedPanels {
  const float* data = nullptr;
  int64_t padded = 0;
  const float* at(int64_t k0, int64_t i, int kc) const { return data + k0 * padded + i * kc; }
};

// The block C[m_begin:m_end, n_begin:n_end] of the product on the calling thread. A and B come
// from `a_shared` / `b_shared` where given, else the thread packs them itself (A block once per
// depth block, B block once per column block and depth block), or reads an fp32 or bf16 A in place.
//
// Loop order: a thread that packs its own A block does so once per depth block for all its
// columns (depth blocks outside the column blocks, GotoBLAS's order). Where A needs no packing
// by the thread (shared, or fp32 or bf16 in place) the depth blocks run inside each column block
// instead, so a column block of C (and a 16-bit C's fp32 partial sums) stays in cache while
// every depth block is added to it, rather than going to memory and back once per depth block
// (the LM head's forward product has 1024 x 50304 partial sums, 200 MB; the speed difference in
// one A/B of bench/gemm_bench was within the two runs' own spread of ~5% of the same build at the
// gpt2 shapes, 2026-12-02). Each element still receives the depth blocks in order, so the bits
// do not change.
template <typename TA, typename TB, typename TC>
void gemm_block(const Product<TA, TB, TC>& g, int64_t m_begin, int64_t m_end, int64_t n_begin,
                int64_t n_end, const SharedPanels& a_shared, const SharedPanels& b_shared) {
  const bool own_a = g.packs_a() && a_shared.data == nullptr;
  const bool own_b = b_shared.data == nullptr;
  const int nc_max = b_block_columns();
  thread_local ScratchBuffer a_buf, b_buf;
  float* a_pack = own_a ? a_buf.floats(a_block_floats(m_end - m_begin, g.K)) : nullptr;
  float* b_pack = own_b ? b_buf.floats(b_block_floats(g.K)) : nullptr;
  alignas(64) float tile[kMR * kNR];

  // Rows [m0, m0 + mc) x columns [n0, n0 + nc) of C at depth [k0, k0 + kc), A's block packed.
  const auto run = [&](int64_t m0, int mc, int64_t k0, int kc, int64_t n0, int nc) {
    const Epilogue epi{g.alpha, g.beta, k0 == 0, k0 + kc == g.K};
    if (own_b)
      for (int j = 0; j < nc; j += kNR) pack_b_panel(g, b_pack + int64_t{j} * kc, n0 + j, k0, kc);
    for (int i = 0; i < mc; i += kMR) {
      const int rows = std::min(kMR, mc - i);
      const int64_t m = m0 + i;
      // A's micro-panel: packed (shared by the team or the thread's own), else A's rows.
      const float* a = a_shared.data != nullptr ? a_shared.at(k0, m, kc)
                       : own_a                  ? a_pack + int64_t{i} * kc
                                                : nullptr;
      for (int j = 0; j < nc; j += kNR) {
        const int64_t n = n0 + j;
        const int cols = std::min(kNR, nc - j);
        const float* b = own_b ? b_pack + int64_t{j} * kc : b_shared.at(k0, n, kc);
        float* partial = g.partial == nullptr ? nullptr : g.partial + m * g.N + n;
        prefetch_block(g.C + m * g.ldc + n, g.ldc, rows, cols);
        if (partial != nullptr) prefetch_block(partial, g.N, rows, cols);
        if (g.trans_a)
          micro_kernel<kMR, ALayout::kKMajor>(tile, a, 0, b, kc);
        else if (a != nullptr)  // fp16 rows, widened by packing
          micro_kernel_rows<kMR>(rows, tile, a, kc, b, kc);
        else if constexpr (std::is_same_v<TA, float> || std::is_same_v<TA, bf16>)
          // (A's rows formed only here, where A is not transposed.)
          micro_kernel_rows<kMR>(rows, tile, g.A + m * g.lda + k0, g.lda, b, kc);
        store_tile(tile, rows, cols, g.C + m * g.ldc + n, g.ldc, partial, g.N, epi);
      }
    }
  };

  const auto depth = [&](int64_t k0) { return static_cast<int>(std::min<int64_t>(kKC, g.K - k0)); };
  const auto width = [&](int64_t n0) {
    return static_cast<int>(std::min<int64_t>(nc_max, n_end - n0));
  };
  for (int64_t m0 = m_begin; m0 < m_end; m0 += kMC) {
    const int mc = static_cast<int>(std::min<int64_t>(kMC, m_end - m0));
    if (own_a) {
      for (int64_t k0 = 0; k0 < g.K; k0 += kKC) {
        const int kc = depth(k0);
        pack_a_panels(g, a_pack, m0, m0 + mc, k0, kc);  // once for all the columns
        for (int64_t n0 = n_begin; n0 < n_end; n0 += nc_max) run(m0, mc, k0, kc, n0, width(n0));
      }
    } else {
      for (int64_t n0 = n_begin; n0 < n_end; n0 += nc_max)
        for (int64_t k0 = 0; k0 < g.K; k0 += kKC) run(m0, mc, k0, depth(k0), n0, width(n0));
    }
  }
}

// The largest operand packed whole and shared (fp32 elements): beyond it each thread packs
// blocks of its own (the budget bounds the scratch: 32 MiB, as a widened copy of the same
// operand would take).
constexpr int64_t kSharedPackElements = int64_t{8} << 20;

// How a team of `threads` (> 1) shares a product: threads take blocks of C's columns or of its
// rows, as many blocks as keep them equally busy on a machine whose cores do not run at one
// speed (dynamic schedule). Every block needs all of the other operand: it is packed once,
// whole, by the team and shared (nothing to pack for an A read in place). Columns split unless
// rows need the smaller shared operand. An operand too large to share makes each thread take one
// contiguous block and pack what it needs itself.
struct TeamLayout {
  bool split_m = false;     // blocks of rows (B shared), else of columns (A shared, if packed)
  bool own_blocks = false;  // too large to share: one contiguous block per thread
  int64_t shared = 0;       // floats of the shared operand (0: none)
  int64_t panels = 0;       // micro-panels along the split dimension
  int64_t block_panels = 0, blocks = 0;  // the dynamic schedule's blocks (shared case)
};

TeamLayout team_layout(int64_t M, int64_t N, int64_t K, bool packs_a, int threads) {
  TeamLayout t;
  const int64_t m_padded = (M + kMR - 1) / kMR * kMR, n_padded = (N + kNR - 1) / kNR * kNR;
  const int64_t shared_a = packs_a ? m_padded * K : 0;  // when columns split
  const int64_t shared_b = n_padded * K;                // when rows split
  const int64_t panels_m = m_padded / kMR, panels_n = n_padded / kNR;
  t.split_m = shared_b < shared_a ? panels_m >= threads : panels_n < threads;
  t.shared = t.split_m ? shared_b : shared_a;
  if (t.shared > kSharedPackElements) {
    t.own_blocks = true;
    t.shared = 0;
    t.split_m = packs_a && M > N ? panels_m >= threads : panels_n < threads;
  }
  t.panels = t.split_m ? panels_m : panels_n;
  // Two blocks per thread: a thread slower by up to half a block's time is absorbed. Finer blocks
  // stream the shared operand more often: 3, 4 and 8 per thread measured 1-3% slower on the
  // gpt2-124m products at AVX2 (bench/gemm_bench), one per thread about as fast as two.
  t.block_panels = std::max<int64_t>(1, t.panels / (2 * threads));
  t.blocks = (t.panels + t.block_panels - 1) / t.block_panels;
  return t;
}

// The team's size for a product (products below kSerialMacs run on the calling thread alone).
int team_size(int64_t M, int64_t N, int64_t K, int threads) {
  return M * N * K <= kSerialMacs ? 1 : threads;
}

template <typename TA, typename TB, typename TC>
void gemm_parallel(const Product<TA, TB, TC>& g) {
  const int threads = team_size(g.M, g.N, g.K, omp_get_max_threads());
  if (threads == 1) return gemm_block(g, 0, g.M, 0, g.N, {}, {});
  const TeamLayout t = team_layout(g.M, g.N, g.K, g.packs_a(), threads);
  const int64_t split = t.split_m ? kMR : kNR, extent = t.split_m ? g.M : g.N;
  if (t.own_blocks) {
#pragma omp parallel num_threads(threads)
    {
      const int i = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t begin = t.panels * i / nt * split;
      const int64_t end = std::min(extent, t.panels * (i + 1) / nt * split);
      if (begin < end) {
        if (t.split_m)
          gemm_block(g, begin, end, 0, g.N, {}, {});
        else
          gemm_block(g, 0, g.M, begin, end, {}, {});
      }
    }
    return;
  }
  thread_local ScratchBuffer shared_buf;
  SharedPanels a_shared, b_shared;
  if (t.shared > 0) {
    float* data = shared_buf.floats(t.shared);
    (t.split_m ? b_shared : a_shared) = SharedPanels{data, t.split_m ? g.n_padded() : g.m_padded()};
  }
  const int64_t panels_m = g.m_padded() / kMR, panels_n = g.n_padded() / kNR;
  const int64_t chunks = (g.K + kKC - 1) / kKC;
#pragma omp parallel num_threads(threads)
  {
    if (t.shared > 0) {
      // A in runs of kPanelsPerRun micro-panels (a few cache lines of each of its rows per run).
      const int64_t runs_m = (panels_m + kPanelsPerRun - 1) / kPanelsPerRun;
#pragma omp for schedule(static)
      for (int64_t w = 0; w < chunks * runs_m; ++w) {
        if (t.split_m) continue;
        const int64_t k0 = w / runs_m * kKC, m = w % runs_m * kPanelsPerRun * kMR;
        const int kc = static_cast<int>(std::min<int64_t>(kKC, g.K - k0));
        pack_a_panels(g, const_cast<float*>(a_shared.at(k0, m, kc)), m,
                      std::min(g.M, m + kPanelsPerRun * kMR), k0, kc);
      }
#pragma omp for schedule(static)
      for (int64_t w = 0; w < chunks * panels_n; ++w) {
        if (!t.split_m) continue;
        const int64_t k0 = w / panels_n * kKC, j = w % panels_n * kNR;
        const int kc = static_cast<int>(std::min<int64_t>(kKC, g.K - k0));
        pack_b_panel(g, const_cast<float*>(b_shared.at(k0, j, kc)), j, k0, kc);
      }
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < t.blocks; ++b) {
      const int64_t first = b * t.block_panels * split;
      const int64_t last = std::min(extent, (b + 1) * t.block_panels * split);
      if (t.split_m)
        gemm_block(g, first, last, 0, g.N, a_shared, b_shared);
      else
        gemm_block(g, 0, g.M, first, last, a_shared, b_shared);
    }
  }
}

// K == 0: the product is an empty sum, so C = beta * C (beta == 0 writes zeros, never reads C).
template <typename T>
void scale_c(int64_t M, int64_t N, float beta, T* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      T& c = C[m * ldc + n];
      c = beta == 0.0f ? from_f32<T>(0.0f) : from_f32<T>(beta * to_f32(c));
    }
}

}  // namespace

template <typename TA, typename TB, typename TC>
void packed_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta, TC* C,
                 int64_t ldc) {
  TESSERA_CHECK(M >= 0 && N >= 0 && K >= 0);
  TESSERA_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K));
  TESSERA_CHECK(ldb >= std::max<int64_t>(1, trans_b ? K : N));
  TESSERA_CHECK(ldc >= std::max<int64_t>(1, N));
  if constexpr (!std::is_same_v<TC, float>)
    TESSERA_CHECK_MSG(beta == 0.0f, "a 16-bit output gemm takes beta 0 only");
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  // A 16-bit C summed over several depth blocks keeps its running sum in fp32 (the calling
  // thread's buffer; the team's threads write disjoint blocks of it).
  thread_local ScratchBuffer partial;
  const bool needs_partial = !std::is_same_v<TC, float> && K > kKC;
  gemm_parallel(Product<TA, TB, TC>{trans_a, trans_b, M, N, K, alpha, beta, A, lda, B, ldb, C, ldc,
                                    needs_partial ? partial.floats(M * N) : nullptr});
}

PackedGemmScratch packed_gemm_scratch(int64_t M, int64_t N, int64_t K, bool packs_a, bool c_16bit,
                                      int threads) {
  PackedGemmScratch s;
  if (M == 0 || N == 0 || K == 0) return s;  // packed_gemm returns before any buffer
  if (c_16bit && K > kKC) s.partial = 4 * M * N;
  const int team = team_size(M, N, K, threads);
  // gemm_block's buffers for a block of `rows` rows of C, with A and B shared or not.
  const auto block = [&](int64_t rows, bool a_shared, bool b_shared) {
    s.a_block = packs_a && !a_shared ? 4 * a_block_floats(rows, K) : 0;
    s.b_block = b_shared ? 0 : 4 * b_block_floats(K);
  };
  if (team == 1) {
    s.workers = 1;
    block(M, false, false);
    return s;
  }
  const TeamLayout t = team_layout(M, N, K, packs_a, team);
  // The largest block a thread takes (the contiguous blocks differ by at most one panel).
  const int64_t panels = t.own_blocks ? (t.panels + team - 1) / team : t.block_panels;
  const int64_t workers =
      t.own_blocks ? std::min<int64_t>(team, t.panels) : std::min<int64_t>(team, t.blocks);
  s.workers = static_cast<int>(workers);
  const bool shares = !t.own_blocks && t.shared > 0;
  if (shares) s.shared = 4 * t.shared;
  if (t.split_m)
    block(std::min(M, panels * kMR), false, shares);
  else
    block(M, shares, false);
  return s;
}

void register_gemm_packed() {
  register_kernel<&kernels::packed_gemm_scratch>(kThisTarget, &packed_gemm_scratch);
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::packed_gemm<T, T, float>>(kThisTarget, &packed_gemm<T, T, float>);
    if constexpr (!std::is_same_v<T, float>)
      register_kernel<&kernels::packed_gemm<T, T, T>>(kThisTarget, &packed_gemm<T, T, T>);
  });
}

TESSERA_TARGET_END
