// GEMMs on 16-bit operands through the fp32 path: each operand is widened (exactly: every bf16
// and fp16 value is an fp32 value) into a dense fp32 copy, the fp32 gemm runs, and a 16-bit
// output is rounded to nearest even. The products and fp32 accumulation are those of a 16-bit
// GEMM with fp32 accumulation; the speed is fp32's plus one pass over the operands.
// Used when bf16_gemm_path() is kWidenToFp32 (set for comparisons; the blocked GEMM of
// gemm_packed.h is the default where oneDNN has no bf16 dot products, gemm.h) and by
// gemm_fp32_a.
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/kernels/gemm.h"

namespace tessera::kernels::detail {

// C (M,N) = alpha op(A) op(B) + beta C, fp32 output. TA and TB are bf16, fp16 or float (an fp32
// operand is used in place, not copied); the instantiations are (bf16, bf16), (fp16, fp16),
// (float, bf16) and (float, fp16).
template <typename TA, typename TB>
void widened_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta, float* C,
                  int64_t ldc);
// The same with a 16-bit output TC (= TB), rounded to nearest even; beta must be 0.
template <typename TA, typename TB, typename TC>
void widened_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta, TC* C,
                  int64_t ldc);

// oneDNN's own bf16 matmul (gemm.cc; TC float or bf16), for bf16_gemm_path() == kOneDnnBf16.
template <typename TC>
void native_bf16_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, TC* C,
                      int64_t ldc);

// Whether the calling thread is inside a VaryingTokenCounts scope (gemm.h).
bool token_counts_vary();
// The largest size <= n (n > 0) with at most kBoundedShapeBits significant bits (gemm.h).
int64_t bounded_size(int64_t n);
// oneDNN primitives gemm keeps (0 without oneDNN), for tests. At most kKeptPrimitives, the least
// recently used given up first (oneDNN keeps 1024 in its own primitive cache by default, too);
// set_kept_primitives changes that bound (tests; no effect without oneDNN).
constexpr size_t kKeptPrimitives = 1024;
size_t onednn_primitives_cached();
void set_kept_primitives(size_t capacity);

// plan_gemm (gemm.h) for the widened path: the fp32 copies of 16-bit operands (one buffer each per
// calling thread and widened_gemm<TA, TB> instantiation), of a 16-bit output (per
// widened_gemm<TA, TB, TC>), then the fp32 product's own scratch.
void plan_widened_gemm(ScratchPlan& plan, const GemmShape& shape);
// plan_gemm for a product oneDNN runs (gemm.cc: its scratchpad, asked of the primitive; the build
// without oneDNN runs plain loops that take none).
void plan_onednn_gemm(ScratchPlan& plan, const GemmShape& shape);

}  // namespace tessera::kernels::detail
