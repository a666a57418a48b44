// fp16 GEMM by widening to fp32 (see gemm.h for why): the operand as stored (rows x cols with
// leading dimension ld) is copied into a dense fp32 buffer, then the fp32 gemm runs.
#include <vector>

#include "tessera/core/error.h"
#include "tessera/kernels/gemm.h"

namespace tessera::kernels {
namespace {

// The stored matrix of op(X): (rows, cols) as laid out in memory, dense fp32 copy.
std::vector<float> widen(const fp16* x, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
#pragma omp parallel for if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = to_f32(x[r * ld + c]);
  return out;
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const fp16* A,
          int64_t lda, const fp16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  // Stored shapes: A is (M,K) or (K,M) when transposed; B is (K,N) or (N,K).
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  const std::vector<float> a = widen(A, a_rows, a_cols, lda);
  const std::vector<float> b = widen(B, b_rows, b_cols, ldb);
  gemm(trans_a, trans_b, M, N, K, alpha, a.data(), std::max<int64_t>(a_cols, 1), b.data(),
       std::max<int64_t>(b_cols, 1), beta, C, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const fp16* A,
          int64_t lda, const fp16* B, int64_t ldb, float beta, fp16* C, int64_t ldc) {
  TESSERA_CHECK_MSG(beta == 0.0f, "fp16-output gemm supports beta 0 only");
  if (M == 0 || N == 0) return;
  std::vector<float> c(static_cast<size_t>(M * N));
  gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, c.data(), N);
#pragma omp parallel for if (M * N > (1 << 16))
  for (int64_t r = 0; r < M; ++r)
    for (int64_t col = 0; col < N; ++col) C[r * ldc + col] = fp16(c[r * N + col]);
}

}  // namespace tessera::kernels
