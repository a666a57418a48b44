#include "tessera/kernels/gemm_widened.h"

#include <algorithm>
#include <type_traits>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/elementwise.h"
#include "tessera/kernels/gemm.h"
#include "tessera/kernels/scratch.h"
#include "tessera/kernels/scratch_plan.h"

namespace tessera::kernels::detail {
namespace {

// The stored matrix (rows, cols, leading dimension ld) as dense fp32: a widened copy in `buf`,
// or the matrix itself when it already is fp32 (*ld_out tells which leading dimension applies).
template <typename T>
const float* as_f32(ScratchBuffer& buf, const T* src, int64_t rows, int64_t cols, int64_t ld,
                    int64_t* ld_out) {
  if constexpr (std::is_same_v<T, float>) {
    *ld_out = ld;
    return src;
  } else {
    float* dst = buf.floats(rows * cols);
    *ld_out = std::max<int64_t>(cols, 1);
    if (ld == cols) {
      widen_to_f32(dst, src, rows * cols);
    } else {
#pragma omp parallel for schedule(static) if (rows * cols > (int64_t{1} << 16))
      for (int64_t r = 0; r < rows; ++r) widen_to_f32(dst + r * cols, src + r * ld, cols);
    }
    return dst;
  }
}

}  // namespace

template <typename TA, typename TB>
void widened_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta, float* C,
                  int64_t ldc) {
  if (M == 0 || N == 0) return;
  // Stored shapes: A is (M,K) or (K,M) when transposed; B is (K,N) or (N,K).
  thread_local ScratchBuffer a_buf, b_buf;
  int64_t a_ld = 0, b_ld = 0;
  const float* a = as_f32(a_buf, A, trans_a ? K : M, trans_a ? M : K, lda, &a_ld);
  const float* b = as_f32(b_buf, B, trans_b ? N : K, trans_b ? K : N, ldb, &b_ld);
  gemm(trans_a, trans_b, M, N, K, alpha, a, a_ld, b, b_ld, beta, C, ldc);
}

template <typename TA, typename TB, typename TC>
void widened_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta, TC* C,
                  int64_t ldc) {
  TESSERA_CHECK_MSG(beta == 0.0f, "16-bit-output gemm supports beta 0 only");
  if (M == 0 || N == 0) return;
  thread_local ScratchBuffer c_buf;
  float* c = c_buf.floats(M * N);
  widened_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, c, N);
  if (ldc == N) return round_from_f32(C, c, M * N);
#pragma omp parallel for schedule(static) if (M * N > (int64_t{1} << 16))
  for (int64_t r = 0; r < M; ++r) round_from_f32(C + r * ldc, c + r * N, N);
}

void plan_widened_gemm(ScratchPlan& plan, const GemmShape& g) {
  if (g.M == 0 || g.N == 0) return;
  const std::string operands = std::string(dtype_name(g.a)) + "," + dtype_name(g.b);
  GemmShape product = g;
  if (g.c != DType::kF32) {  // the fp32 product, then rounded into C
    plan.grow("widened " + operands + ">" + dtype_name(g.c) + " C",
              4 * std::max<int64_t>(1, g.M * g.N));
    product.c = DType::kF32;
    product.ldc = g.N;
    product.beta = 0.0f;
  }
  // as_f32: a dense fp32 copy of a 16-bit stored matrix (rows x cols), leading dimension cols.
  const auto widen = [&](const char* which, DType type, int64_t rows, int64_t cols, int64_t* ld) {
    if (type == DType::kF32) return;
    plan.grow("widened " + operands + " " + which, 4 * std::max<int64_t>(1, rows * cols));
    *ld = std::max<int64_t>(cols, 1);
  };
  widen("A", g.a, g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, &product.lda);
  widen("B", g.b, g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, &product.ldb);
  product.a = product.b = DType::kF32;
  plan_gemm(plan, product);
}

#define TESSERA_WIDENED_GEMM(TA, TB)                                                              \
  template void widened_gemm<TA, TB>(bool, bool, int64_t, int64_t, int64_t, float, const TA*,     \
                                     int64_t, const TB*, int64_t, float, float*, int64_t);        \
  template void widened_gemm<TA, TB, TB>(bool, bool, int64_t, int64_t, int64_t, float, const TA*, \
                                         int64_t, const TB*, int64_t, float, TB*, int64_t);
TESSERA_WIDENED_GEMM(bf16, bf16)
TESSERA_WIDENED_GEMM(fp16, fp16)
TESSERA_WIDENED_GEMM(float, bf16)
TESSERA_WIDENED_GEMM(float, fp16)
#undef TESSERA_WIDENED_GEMM

}  // namespace tessera::kernels::detail
