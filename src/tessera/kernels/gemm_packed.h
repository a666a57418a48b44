// Tessera's own blocked GEMM, compiled per CPU target (gemm_packed.cc).
//
//   C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C
//
// Same arguments and conventions as gemm.h (leading dimensions, K == 0, beta == 0 never reads C).
// A and B are both fp32, bf16 or fp16; C is fp32, or the operands' 16-bit type (beta must then be
// 0). 16-bit operands are widened to fp32 (exactly) as they are packed or read, products
// accumulate in fp32, and a 16-bit C is rounded to nearest even once, from the fp32 sum.
//
// Summation order, the same on every CPU target and for any thread count: K is cut into depth
// blocks of kPackedGemmDepth; within a block, element (m, n) is acc = 0, then for k in order
// acc = fmadd(A(m,k), B(k,n), acc) (fused where the target has FMA, simd/vec.h); the blocks then
// go into C in order: C = alpha acc_0 (+ fmadd with beta C when beta != 0), C = C + alpha acc_j
// after. A 16-bit C keeps that running sum in fp32 and is rounded once at the end. Nothing
// depends on an element's place in the matrix, so a row or column slice of a product (a
// tensor-parallel shard) has the bits of the same part of the whole product.
//
// Thread-safe; runs on the calling thread's OpenMP team (one thread for small products), with
// per-thread packing buffers (ScratchBuffer, MemoryCategory::kOther).
#pragma once

#include <cstdint>

#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

// Depth of the blocks K is summed in (see above).
constexpr int kPackedGemmDepth = 384;

// Whether the micro-kernel is register-blocked for `target`'s vector registers (the x86-64 FMA
// targets). Elsewhere it runs on the portable vector layer: correct, but on x86-64 baseline its
// bf16 products run at 0.75-1.05x oneDNN's SSE4.1 sgemm (fp32 ones 0.82-1.02x;
// docs/performance.md), and it was never measured on arm64 against oneDNN, so gemm.h widens 16-bit
// products for oneDNN there instead.
inline bool blocked_gemm_is_tuned(CpuTarget target) {
  return target == CpuTarget::kAvx2 || target == CpuTarget::kAvx512 ||
         target == CpuTarget::kAvx512Bf16;
}

template <typename TA, typename TB, typename TC>
void packed_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta, TC* C,
                 int64_t ldc) {
  dispatch<&packed_gemm<TA, TB, TC>>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                     ldc);
}

// The scratch one packed_gemm call grows (ScratchBuffer sizes in bytes; 0: that buffer is not
// used), for a product of M x N x K on a team of `threads` threads, `packs_a` when A is fp16 or
// transposed (an fp32 or bf16 A not transposed is read in place; packed_gemm_packs_a), `c_16bit`
// for a 16-bit C. From the sizing code the call allocates with (gemm_packed.cc); for the plan of
// kernels/scratch_plan.h.
struct PackedGemmScratch {
  int workers = 0;      // threads that take blocks of C (each with the buffers below)
  int64_t a_block = 0;  // a worker's A block, packed by itself
  int64_t b_block = 0;  // a worker's B block
  int64_t shared = 0;   // the operand packed whole and shared by the team (calling thread's)
  int64_t partial = 0;  // a 16-bit C's fp32 running sum over the depth blocks (calling thread's)
};
// Whether packed_gemm packs (widens or transposes) an A of this kind rather than read it in place.
inline bool packed_gemm_packs_a(bool trans_a, bool a_is_fp16) { return trans_a || a_is_fp16; }
inline PackedGemmScratch packed_gemm_scratch(int64_t M, int64_t N, int64_t K, bool packs_a,
                                             bool c_16bit, int threads) {
  return dispatch<&packed_gemm_scratch>(M, N, K, packs_a, c_16bit, threads);
}

}  // namespace tessera::kernels
