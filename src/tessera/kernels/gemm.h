// General matrix multiply, the one entry point every GEMM in Tessera goes through.
//
//   C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C
//
// Row-major with leading dimensions (elements between consecutive rows); op(X) is X or X^T.
// lda >= (trans_a ? M : K), ldb >= (trans_b ? K : N), ldc >= N (violations are bugs: they abort).
// M or N == 0 is a no-op; K == 0 gives C = beta * C (an empty sum). With beta == 0, C is only
// written, never read (NaNs in it do not propagate). Elements of C between N and ldc are untouched.
// fp32 runs on oneDNN's matmul, which dispatches on the CPU at run time (its ISA is capped with
// the kernels' by TESSERA_CPU_TARGET, cpu_target.h). bf16 runs on oneDNN's bf16 matmul where the
// CPU has bf16 dot products (avx512_bf16); elsewhere oneDNN refuses bf16 (below AVX-512) or only
// emulates it, and bf16 runs on Tessera's blocked GEMM (gemm_packed.h), which widens operands to
// fp32 while packing them, instead of widening copies for oneDNN's fp32 matmul (the widened
// path, gemm_widened.h, still selectable: set_bf16_gemm_path). fp16 always runs on the blocked
// GEMM (or widened, when that path is selected). For fp32, oneDNN beat OpenBLAS sgemm by 1.2-2x
// on AVX-512 (docs/performance.md) and matched it on an AVX2-only EPYC (66.8 vs 65.8 GFLOP/s at
// 1024^3, 2 cores).
// Thread-safe (oneDNN primitives are cached per shape behind a lock). Uses the calling process's
// thread count (core/threads.h).
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::kernels {

class ScratchPlan;

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// bf16 inputs, fp32 output (used for weight gradients accumulating into fp32 buffers).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc);

// bf16 inputs, bf16 output rounded from the fp32 accumulator. beta must be 0.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, float beta, bf16* C, int64_t ldc);

// fp16 inputs, fp32 output / fp16 output (beta must be 0 for fp16 output): oneDNN 2.6 has no
// fp16 matmul on CPUs without AVX512-FP16, so these run on the blocked GEMM (or widened).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const fp16* A,
          int64_t lda, const fp16* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const fp16* A,
          int64_t lda, const fp16* B, int64_t ldb, float beta, fp16* C, int64_t ldc);

// gemm with an fp32 A and a 16-bit B, fp32 output or 16-bit output (beta must be 0): B is widened
// and the fp32 gemm runs, whatever bf16_gemm_path() says. (A name of its own, not an overload of
// gemm: a null B would make the overloads ambiguous.) For a caller on the widened path
// (gemm_widens()) that feeds one 16-bit operand to several products: it widens that operand once
// and passes the fp32 copy as A (kernels/linear.cc: the output gradient of a linear layer, shared
// by its input- and weight-gradient products).
template <typename T, typename TC>
void gemm_fp32_a(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const T* B, int64_t ldb, float beta, TC* C,
                 int64_t ldc);

// Whether gemms on `dtype` operands run widened to fp32 (16-bit types on kWidenToFp32): then a
// 16-bit operand costs one widening pass per call, and a caller using it twice can save one.
bool gemm_widens(DType dtype);

// Declares, on the calling thread and for the scope's lifetime, that the products made meanwhile
// have token counts that change from call to call, as a dropless MoE layer's experts' rows do
// (model/moe_layer.cc). oneDNN builds and JIT-compiles a primitive for each shape, which gemm
// keeps for the next call of that shape (0.7 ms and 84 KiB each, measured on an AMD EPYC,
// docs/performance.md): such a caller made one for nearly every call, 13% of a small dropless
// MoE model's step. Inside the scope a oneDNN product runs as pieces whose M, and K where C is
// fp32 (a weight gradient's depth is its token count), have at most kBoundedShapeBits significant
// bits: the largest such size first, then the rest the same way (M 1213 = 1152 + 60 + 1). Depth
// pieces accumulate into C in order (the first with beta, the rest with 1). A 16-bit C's K is not
// split, since each piece would round it (on the widened path the fp32 product it is rounded from
// is). So the sizes are bounded (every size below 2^bits, then 2^(bits-1) between one power of two
// and the next) and soon all made; a product's bits are a function of its call's shape alone.
// Each piece reads the whole op(B) again, so the scope is for compute-bound products: an inference
// step (often a few rows, bound by reading the weights) is not in one, and relies on the bound on
// the primitives kept (gemm_widened.h, kKeptPrimitives). Scopes nest; products outside one, and
// those on the blocked GEMM (which keeps nothing per shape), are unchanged.
class VaryingTokenCounts {
 public:
  VaryingTokenCounts();
  ~VaryingTokenCounts();
  VaryingTokenCounts(const VaryingTokenCounts&) = delete;
  VaryingTokenCounts& operator=(const VaryingTokenCounts&) = delete;
};
constexpr int kBoundedShapeBits = 4;

// How bf16 GEMMs run: oneDNN's bf16 matmul, Tessera's blocked GEMM (widening as it packs or reads
// its operands), or widened copies for oneDNN's fp32 matmul. Chosen at the first bf16 GEMM:
// oneDNN bf16 where oneDNN's effective ISA has bf16 dot products, else the blocked GEMM (measured
// faster than the widened path there, docs/performance.md). fp16 follows it, with the blocked GEMM
// in place of oneDNN bf16. Benchmarks and tests may set it (kOneDnnBf16 throws tessera::Error
// where oneDNN has no bf16 matmul).
enum class Bf16GemmPath { kOneDnnBf16, kPacked, kWidenToFp32 };
Bf16GemmPath bf16_gemm_path();
void set_bf16_gemm_path(Bf16GemmPath path);
// "oneDNN bf16", "blocked, widened while packing" (the name the version line has printed since
// the blocked GEMM came; a bf16 A is now widened as it is read) or "widened to fp32".
const char* bf16_gemm_path_name(Bf16GemmPath path);

// One gemm call without its data, for plan_gemm: the arguments of the functions above, the
// operands' and the output's types (b is a's, but for gemm_fp32_a, whose a is fp32), and the size
// of the OpenMP team the call runs on (omp_get_max_threads() when it is made).
struct GemmShape {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
  DType a = DType::kF32, b = DType::kF32, c = DType::kF32;
  int threads = 1;
};

// Records in `plan` the scratch buffers (kernels/scratch_plan.h) that the gemm call `shape`
// grows on the path it takes: oneDNN's scratchpad (its size asked of the primitive the call
// runs), the blocked GEMM's packing buffers, the widened path's fp32 copies. With a team of
// several threads the blocked GEMM's per-thread buffers are those of a thread that takes a whole
// block (the dynamic schedule decides which thread takes the last, smaller one): exact for one
// thread, a bound for more.
void plan_gemm(ScratchPlan& plan, const GemmShape& shape);

// Wall-clock seconds spent inside the gemm functions above since the process started, summed over
// calling threads: benchmarks split a step into its GEMMs and the rest (bench/model_step).
double gemm_seconds();

// Times an n x n x n gemm of `dtype` (fp32, or bf16 in and out) through the functions above at
// the current thread count: one warm-up call, then the best of `repeats` calls, in GFLOP/s
// (2*n^3 flops per call). Time is the calling thread's CPU time, as in Google Benchmark's default
// (not UseRealTime), so a machine shared with other work does not deflate it. For benchmarks
// that print "achieved vs peak measured in the same run".
// Allocates 3 n x n buffers (untracked). Throws tessera::Error for other dtypes or n, repeats <= 0.
double measure_peak_gflops(DType dtype, int64_t n = 2048, int repeats = 3);

}  // namespace tessera::kernels
