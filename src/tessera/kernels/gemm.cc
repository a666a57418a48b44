#include "tessera/kernels/gemm.h"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/kernels/cpu_target.h"
#include "tessera/kernels/gemm_clock.h"
#include "tessera/kernels/gemm_packed.h"
#include "tessera/kernels/gemm_widened.h"
#include "tessera/kernels/onednn_isa.h"
#include "tessera/kernels/scratch.h"
#include "tessera/kernels/scratch_plan.h"

namespace tessera::kernels {
namespace {

// Leading dimensions must cover a stored row: op(A) is (M,K), so A is stored (M,K) or (K,M).
void check_args(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                int64_t ldb, int64_t ldc) {
  TESSERA_CHECK(M >= 0 && N >= 0 && K >= 0);
  TESSERA_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K));
  TESSERA_CHECK(ldb >= std::max<int64_t>(1, trans_b ? K : N));
  TESSERA_CHECK(ldc >= std::max<int64_t>(1, N));
}

// K == 0: the product is an empty sum, so C = beta * C (beta == 0 writes zeros, never reads C).
template <typename T>
void scale_c(int64_t M, int64_t N, float beta, T* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m) {
    T* row = C + m * ldc;
    for (int64_t n = 0; n < N; ++n)
      row[n] = beta == 0.0f ? from_f32<T>(0.0f) : from_f32<T>(beta * to_f32(row[n]));
  }
}

constexpr int64_t kSerialMacs = int64_t{128} * 128 * 128;

// Sets the calling thread's OpenMP team size to `threads` for its lifetime (even if oneDNN
// throws); 0 leaves it as it is.
class TeamScope {
 public:
  explicit TeamScope(int threads) : saved_(omp_get_max_threads()), threads_(threads) {
    if (threads_ > 0 && threads_ != saved_) omp_set_num_threads(threads_);
  }
  ~TeamScope() {
    if (threads_ > 0 && threads_ != saved_) omp_set_num_threads(saved_);
  }
  TeamScope(const TeamScope&) = delete;
  TeamScope& operator=(const TeamScope&) = delete;

 private:
  int saved_;
  int threads_;
};

// ---- oneDNN matmul, cached per problem --------------------------------------------------------

struct MatmulKey {
  bool trans_a, trans_b;
  int64_t M, N, K, lda, ldb, ldc;
  dnnl::memory::data_type a_type, c_type;
  float alpha, beta;
  int threads;  // oneDNN picks its blocking for the thread count at creation time
  auto tie() const {
    return std::tie(trans_a, trans_b, M, N, K, lda, ldb, ldc, a_type, c_type, alpha, beta, threads);
  }
  bool operator<(const MatmulKey& o) const { return tie() < o.tie(); }
};

struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a_md, b_md, c_md;
  size_t scratchpad_bytes = 0;
};

dnnl::engine& cpu_engine() {
  // The kernel target is chosen first: TESSERA_CPU_TARGET caps oneDNN's ISA, which oneDNN
  // fixes at its first use.
  static dnnl::engine engine = (active_cpu_target(), dnnl::engine(dnnl::engine::kind::cpu, 0));
  return engine;
}

// Transposes and leading dimensions become strides of a plain (rows, cols) descriptor, so no
// operand is ever copied on our side.
dnnl::memory::desc strided_md(int64_t rows, int64_t cols, bool transposed, int64_t ld,
                              dnnl::memory::data_type type) {
  const dnnl::memory::dims strides =
      transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
  return dnnl::memory::desc({rows, cols}, type, strides);
}

std::shared_ptr<const Matmul> make_matmul(const MatmulKey& k) {
  auto mm = std::make_shared<Matmul>();
  mm->a_md = strided_md(k.M, k.K, k.trans_a, k.lda, k.a_type);
  mm->b_md = strided_md(k.K, k.N, k.trans_b, k.ldb, k.a_type);
  mm->c_md = strided_md(k.M, k.N, false, k.ldc, k.c_type);
  dnnl::primitive_attr attr;
  // Scratchpad from us (per calling thread): the library-managed one is shared between
  // primitives and forbids executing a cached primitive from another thread.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
  if (k.beta != 0.0f) {
    // Output scales apply to the accumulator before post-ops: C = alpha*AB + beta*C.
    dnnl::post_ops ops;
    ops.append_sum(k.beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc desc(mm->a_md, mm->b_md, mm->c_md);
  const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
  mm->primitive = dnnl::matmul(pd);
  mm->scratchpad_bytes = pd.scratchpad_desc().get_size();
  return mm;
}

// The key of a product of `team` threads. Small products run on the calling thread alone: below
// ~4 MFLOP (tens of microseconds on one core) an OpenMP fork/join costs about as much as it
// saves, and far more when the sibling core is busy.
MatmulKey matmul_key(const GemmShape& g, int team) {
  using dt = dnnl::memory::data_type;
  const bool serial = team > 1 && g.M * g.N * g.K <= kSerialMacs;
  return MatmulKey{g.trans_a,
                   g.trans_b,
                   g.M,
                   g.N,
                   g.K,
                   g.lda,
                   g.ldb,
                   g.ldc,
                   g.a == DType::kBF16 ? dt::bf16 : dt::f32,
                   g.c == DType::kBF16 ? dt::bf16 : dt::f32,
                   g.alpha,
                   g.beta,
                   serial ? 1 : team};
}

// The primitives kept for the next call of their shape, the least recently used given up beyond
// the capacity (detail::kKeptPrimitives): a caller meeting ever new shapes (a quantized prefill's
// token count is its products' N) keeps a bounded number. A primitive made again for a shape
// computes as the one given up did: the bits depend on the shape, not on what is kept.
class MatmulCache {
 public:
  std::shared_ptr<const Matmul> find(const MatmulKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second.second);  // now the most recent
    return it->second.first;
  }
  // Keeps `mm` for `key` (or returns the one a racing thread kept first).
  std::shared_ptr<const Matmul> keep(const MatmulKey& key, std::shared_ptr<const Matmul> mm) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = entries_.find(key);
    if (it != entries_.end()) return it->second.first;
    order_.push_front(key);
    entries_.emplace(key, std::make_pair(mm, order_.begin()));
    evict_beyond_capacity();
    return mm;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }
  void set_capacity(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = capacity;
    evict_beyond_capacity();
  }

 private:
  // A primitive given up while another thread runs it lives on in that thread's shared_ptr.
  void evict_beyond_capacity() {
    while (entries_.size() > capacity_) {
      entries_.erase(order_.back());
      order_.pop_back();
    }
  }
  std::mutex mutex_;
  std::list<MatmulKey> order_;  // most recently used first
  std::map<MatmulKey, std::pair<std::shared_ptr<const Matmul>, std::list<MatmulKey>::iterator>>
      entries_;
  size_t capacity_ = detail::kKeptPrimitives;
};

MatmulCache& matmul_cache() {
  static MatmulCache cache;
  return cache;
}

std::shared_ptr<const Matmul> cached_matmul(const MatmulKey& key) {
  if (auto mm = matmul_cache().find(key)) return mm;
  // Made outside the lock (it JIT-compiles kernels); a racing thread may make the same one.
  return matmul_cache().keep(key, make_matmul(key));
}

// One product on its own primitive (M, N, K > 0).
template <typename TA, typename TC>
void run_matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const TA* A, int64_t lda, const TA* B, int64_t ldb, float beta, TC* C,
                int64_t ldc) {
  // oneDNN sizes its parallel loops from omp_get_max_threads() when a primitive is created.
  const MatmulKey key = matmul_key(GemmShape{trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta,
                                             dtype_of<TA>(), dtype_of<TA>(), dtype_of<TC>()},
                                   omp_get_max_threads());
  const TeamScope team(key.threads);
  const auto mm = cached_matmul(key);

  thread_local dnnl::stream stream(cpu_engine());
  thread_local ScratchBuffer scratchpad;
  dnnl::engine& engine = cpu_engine();
  // oneDNN takes non-const handles; A and B are only read.
  dnnl::memory a_mem(mm->a_md, engine, const_cast<TA*>(A));
  dnnl::memory b_mem(mm->b_md, engine, const_cast<TA*>(B));
  dnnl::memory c_mem(mm->c_md, engine, C);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
  if (mm->scratchpad_bytes > 0) {
    const dnnl::memory::desc scratch_md({static_cast<int64_t>(mm->scratchpad_bytes)},
                                        dnnl::memory::data_type::u8, dnnl::memory::format_tag::a);
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(scratch_md, engine, scratchpad.get(mm->scratchpad_bytes)));
  }
  mm->primitive.execute(stream, args);
  stream.wait();
}

// Calls piece(m0, rows, k0, depth) for the pieces of an M x K product that VaryingTokenCounts
// (gemm.h) runs: rows in order of bounded sizes, and for each its depth the same way when
// `split_depth`, else whole.
template <typename Piece>
void for_each_bounded_piece(int64_t M, int64_t K, bool split_depth, Piece piece) {
  for (int64_t m0 = 0; m0 < M;) {
    const int64_t rows = detail::bounded_size(M - m0);
    for (int64_t k0 = 0; k0 < K;) {
      const int64_t depth = split_depth ? detail::bounded_size(K - k0) : K - k0;
      piece(m0, rows, k0, depth);
      k0 += depth;
    }
    m0 += rows;
  }
}

template <typename TA, typename TC>
void onednn_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const TA* A, int64_t lda, const TA* B, int64_t ldb, float beta, TC* C,
                 int64_t ldc) {
  check_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  if (!detail::token_counts_vary())
    return run_matmul(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  // Row piece m0 of op(A) starts at row m0 of A, or column m0 when A is stored transposed; depth
  // piece k0 at column k0 of op(A) and row k0 of op(B).
  for_each_bounded_piece(M, K, std::is_same_v<TC, float>,
                         [&](int64_t m0, int64_t rows, int64_t k0, int64_t depth) {
                           const TA* a = A + (trans_a ? k0 * lda + m0 : m0 * lda + k0);
                           const TA* b = B + (trans_b ? k0 : k0 * ldb);
                           run_matmul(trans_a, trans_b, rows, N, depth, alpha, a, lda, b, ldb,
                                      k0 == 0 ? beta : 1.0f, C + m0 * ldc, ldc);
                         });
}

}  // namespace

// fp32 runs on oneDNN too: Debian 12's OpenBLAS 0.3.21 does not know AMD family 1Ah and falls
// back to its Haswell kernels, 1.2-2x slower than oneDNN's AVX-512 brgemm on the transformer
// shapes (docs/performance.md); on an AVX2-only EPYC the two were level (66.8 vs 65.8 GFLOP/s
// at 1024^3).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const detail::GemmClock clock;
  onednn_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace detail {

template <typename TC>
void native_bf16_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, TC* C,
                      int64_t ldc) {
  onednn_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
template void native_bf16_gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const bf16*,
                                      int64_t, const bf16*, int64_t, float, float*, int64_t);
template void native_bf16_gemm<bf16>(bool, bool, int64_t, int64_t, int64_t, float, const bf16*,
                                     int64_t, const bf16*, int64_t, float, bf16*, int64_t);

void plan_onednn_gemm(ScratchPlan& plan, const GemmShape& g) {
  if (g.M == 0 || g.N == 0 || g.K == 0) return;  // no primitive runs (onednn_gemm)
  const auto plan_piece = [&](int64_t rows, int64_t k0, int64_t depth) {
    GemmShape piece = g;
    piece.M = rows;
    piece.K = depth;
    piece.beta = k0 == 0 ? g.beta : 1.0f;  // as onednn_gemm accumulates the later depth pieces
    const MatmulKey key = matmul_key(piece, g.threads);
    const TeamScope team(key.threads);
    const size_t bytes = cached_matmul(key)->scratchpad_bytes;
    if (bytes == 0) return;
    // One scratchpad per calling thread and onednn_gemm<TA, TC> instantiation.
    plan.grow(std::string("oneDNN scratchpad ") + dtype_name(g.a) + ">" + dtype_name(g.c),
              static_cast<int64_t>(bytes));
  };
  if (!detail::token_counts_vary()) return plan_piece(g.M, 0, g.K);
  // The pieces onednn_gemm runs inside a VaryingTokenCounts scope.
  for_each_bounded_piece(
      g.M, g.K, g.c == DType::kF32,
      [&](int64_t, int64_t rows, int64_t k0, int64_t depth) { plan_piece(rows, k0, depth); });
}

size_t onednn_primitives_cached() { return matmul_cache().size(); }

void set_kept_primitives(size_t capacity) { matmul_cache().set_capacity(capacity); }

}  // namespace detail

// ---- which bf16 path, and oneDNN's ISA ---------------------------------------------------------

namespace {

std::atomic<int> g_bf16_path{-1};  // -1: not chosen yet

// oneDNN's effective ISA is at least avx512_core_bf16: the CPU has vdpbf16ps and oneDNN uses it.
bool onednn_has_bf16_dot_products() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx ||
         isa == dnnl::cpu_isa::all;
}

}  // namespace

Bf16GemmPath bf16_gemm_path() {
  int path = g_bf16_path.load(std::memory_order_acquire);
  if (path < 0) {
    // Native only with hardware bf16 dot products: below that oneDNN either refuses bf16
    // (AVX2) or emulates it. There the blocked GEMM, widening as it packs or reads, runs where its
    // micro-kernel is register-blocked for the target (AVX2, AVX-512: as fast as oneDNN's fp32
    // or faster); on the baseline target oneDNN's SSE4.1 sgemm is faster than its bf16 products
    // (model_step's bf16 ran at 0.88x fp32 on them, 0.97-0.98x widened), so bf16 is widened for
    // that (docs/performance.md, "bf16 GEMM without bf16 instructions").
    active_cpu_target();  // applies TESSERA_CPU_TARGET's cap to oneDNN before its first use
    path = static_cast<int>(onednn_has_bf16_dot_products() && onednn_has_bf16_matmul()
                                ? Bf16GemmPath::kOneDnnBf16
                            : blocked_gemm_is_tuned(active_cpu_target())
                                ? Bf16GemmPath::kPacked
                                : Bf16GemmPath::kWidenToFp32);
    g_bf16_path.store(path, std::memory_order_release);
  }
  return static_cast<Bf16GemmPath>(path);
}

void set_bf16_gemm_path(Bf16GemmPath path) {
  if (path == Bf16GemmPath::kOneDnnBf16 && !onednn_has_bf16_matmul())
    throw Error("oneDNN has no bf16 matmul at ISA " + onednn_isa_name());
  g_bf16_path.store(static_cast<int>(path), std::memory_order_release);
}

}  // namespace tessera::kernels
