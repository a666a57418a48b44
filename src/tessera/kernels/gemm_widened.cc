#include "tessera/kernels/gemm_widened.h"

#include <algorithm>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/memory.h"
#include "tessera/kernels/elementwise.h"
#include "tessera/kernels/gemm.h"

namespace tessera::kernels::detail {
namespace {

// A per-thread fp32 buffer that grows on demand and is kept between calls (accounted as
// kOther): the widened operands of the last, largest product.
class WidenBuffer {
 public:
  ~WidenBuffer() {
    if (ptr_) tracked_free(ptr_, bytes_, MemoryCategory::kOther);
  }
  float* get(int64_t floats) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(floats, 1)) * sizeof(float);
    if (bytes > bytes_) {
      if (ptr_) tracked_free(ptr_, bytes_, MemoryCategory::kOther);
      ptr_ = tracked_alloc(bytes, MemoryCategory::kOther);
      bytes_ = bytes;
    }
    return static_cast<float*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// The stored matrix (rows, cols, leading dimension ld) as a dense fp32 copy in dst.
template <typename T>
void widen(float* dst, const T* src, int64_t rows, int64_t cols, int64_t ld) {
  if (ld == cols) return widen_to_f32(dst, src, rows * cols);
#pragma omp parallel for schedule(static) if (rows * cols > (int64_t{1} << 16))
  for (int64_t r = 0; r < rows; ++r) widen_to_f32(dst + r * cols, src + r * ld, cols);
}

}  // namespace

template <typename T>
void widened_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const T* A, int64_t lda, const T* B, int64_t ldb, float beta, float* C,
                  int64_t ldc) {
  if (M == 0 || N == 0) return;
  // Stored shapes: A is (M,K) or (K,M) when transposed; B is (K,N) or (N,K).
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  thread_local WidenBuffer a_buf, b_buf;
  float* a = a_buf.get(a_rows * a_cols);
  float* b = b_buf.get(b_rows * b_cols);
  widen(a, A, a_rows, a_cols, lda);
  widen(b, B, b_rows, b_cols, ldb);
  gemm(trans_a, trans_b, M, N, K, alpha, a, std::max<int64_t>(a_cols, 1), b,
       std::max<int64_t>(b_cols, 1), beta, C, ldc);
}

template <typename T>
void widened_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const T* A, int64_t lda, const T* B, int64_t ldb, float beta, T* C,
                  int64_t ldc) {
  TESSERA_CHECK_MSG(beta == 0.0f, "16-bit-output gemm supports beta 0 only");
  if (M == 0 || N == 0) return;
  thread_local WidenBuffer c_buf;
  float* c = c_buf.get(M * N);
  widened_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, c, N);
  if (ldc == N) return round_from_f32(C, c, M * N);
#pragma omp parallel for schedule(static) if (M * N > (int64_t{1} << 16))
  for (int64_t r = 0; r < M; ++r) round_from_f32(C + r * ldc, c + r * N, N);
}

template void widened_gemm<bf16>(bool, bool, int64_t, int64_t, int64_t, float, const bf16*,
                                 int64_t, const bf16*, int64_t, float, float*, int64_t);
template void widened_gemm<bf16>(bool, bool, int64_t, int64_t, int64_t, float, const bf16*,
                                 int64_t, const bf16*, int64_t, float, bf16*, int64_t);
template void widened_gemm<fp16>(bool, bool, int64_t, int64_t, int64_t, float, const fp16*,
                                 int64_t, const fp16*, int64_t, float, float*, int64_t);
template void widened_gemm<fp16>(bool, bool, int64_t, int64_t, int64_t, float, const fp16*,
                                 int64_t, const fp16*, int64_t, float, fp16*, int64_t);

}  // namespace tessera::kernels::detail

namespace tessera::kernels {

// The public 16-bit overloads (gemm.h): bf16 on the path bf16_gemm_path() chose, fp16 widened.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (bf16_gemm_path() == Bf16GemmPath::kOneDnnBf16)
    return detail::native_bf16_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  detail::widened_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, float beta, bf16* C, int64_t ldc) {
  TESSERA_CHECK_MSG(beta == 0.0f, "bf16-output gemm accumulates only into fp32 outputs");
  if (bf16_gemm_path() == Bf16GemmPath::kOneDnnBf16)
    return detail::native_bf16_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  detail::widened_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const fp16* A,
          int64_t lda, const fp16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  detail::widened_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const fp16* A,
          int64_t lda, const fp16* B, int64_t ldb, float beta, fp16* C, int64_t ldc) {
  detail::widened_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

const char* bf16_gemm_path_name(Bf16GemmPath path) {
  return path == Bf16GemmPath::kOneDnnBf16 ? "oneDNN bf16" : "widened to fp32";
}

}  // namespace tessera::kernels
