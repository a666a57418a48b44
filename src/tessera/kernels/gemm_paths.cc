// The public 16-bit GEMMs of gemm.h and the path each takes: oneDNN's bf16 matmul, Tessera's
// blocked GEMM (gemm_packed.h) or the widened fp32 path (gemm_widened.h), as bf16_gemm_path()
// says. Shared by the full build (gemm.cc chooses the path) and the build without oneDNN
// (gemm_reference.cc).
#include <algorithm>
#include <bit>
#include <string>
#include <type_traits>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/gemm.h"
#include "tessera/kernels/gemm_clock.h"
#include "tessera/kernels/gemm_packed.h"
#include "tessera/kernels/gemm_widened.h"
#include "tessera/kernels/scratch_plan.h"

namespace tessera::kernels {
namespace {

// A 16-bit product on the chosen path (TC float, or T with beta 0). fp16 has no oneDNN path
// (oneDNN 2.6 has no fp16 matmul without AVX512-FP16) and takes the blocked GEMM there.
template <typename T, typename TC>
void gemm_16bit(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const T* A, int64_t lda, const T* B, int64_t ldb, float beta, TC* C, int64_t ldc) {
  if constexpr (!std::is_same_v<TC, float>) {
    TESSERA_CHECK_MSG(beta == 0.0f, "16-bit-output gemm accumulates only into fp32 outputs");
  }
  const detail::GemmClock clock;
  const Bf16GemmPath path = bf16_gemm_path();
  if constexpr (std::is_same_v<T, bf16>) {
    if (path == Bf16GemmPath::kOneDnnBf16)
      return detail::native_bf16_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                      ldc);
  }
  if (path == Bf16GemmPath::kWidenToFp32)
    return detail::widened_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  packed_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// plan_gemm for the blocked GEMM: its buffers, named per packed_gemm<TA, TB, TC> instantiation
// (each declares its own thread_local ones) and per thread for the blocks a thread packs.
void plan_packed_gemm(ScratchPlan& plan, const GemmShape& g) {
  const PackedGemmScratch s =
      packed_gemm_scratch(g.M, g.N, g.K, packed_gemm_packs_a(g.trans_a, g.a == DType::kF16),
                          g.c != DType::kF32, g.threads);
  const std::string types =
      std::string("blocked ") + dtype_name(g.a) + "," + dtype_name(g.b) + ">" + dtype_name(g.c);
  for (int t = 0; t < s.workers; ++t) {
    if (s.a_block > 0) plan.grow(types + " A block, thread " + std::to_string(t), s.a_block);
    if (s.b_block > 0) plan.grow(types + " B block, thread " + std::to_string(t), s.b_block);
  }
  if (s.shared > 0) plan.grow(types + " shared panels", s.shared);
  if (s.partial > 0) plan.grow(types + " partial sums", s.partial);
}

}  // namespace

namespace {
thread_local int t_varying_token_counts = 0;  // open VaryingTokenCounts scopes on this thread
}  // namespace

VaryingTokenCounts::VaryingTokenCounts() { ++t_varying_token_counts; }
VaryingTokenCounts::~VaryingTokenCounts() { --t_varying_token_counts; }

namespace detail {

bool token_counts_vary() { return t_varying_token_counts > 0; }

int64_t bounded_size(int64_t n) {
  const int drop =
      std::max(0, static_cast<int>(std::bit_width(static_cast<uint64_t>(n))) - kBoundedShapeBits);
  return (n >> drop) << drop;
}

}  // namespace detail

void plan_gemm(ScratchPlan& plan, const GemmShape& g) {
  if (g.a == DType::kF32 && g.b == DType::kF32) return detail::plan_onednn_gemm(plan, g);
  if (g.a == DType::kF32) return detail::plan_widened_gemm(plan, g);  // gemm_fp32_a
  const Bf16GemmPath path = bf16_gemm_path();                         // as gemm_16bit chooses
  if (g.a == DType::kBF16 && path == Bf16GemmPath::kOneDnnBf16)
    return detail::plan_onednn_gemm(plan, g);
  if (path == Bf16GemmPath::kWidenToFp32) return detail::plan_widened_gemm(plan, g);
  plan_packed_gemm(plan, g);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_16bit(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
          int64_t lda, const bf16* B, int64_t ldb, float beta, bf16* C, int64_t ldc) {
  gemm_16bit(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const fp16* A,
          int64_t lda, const fp16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_16bit(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const fp16* A,
          int64_t lda, const fp16* B, int64_t ldb, float beta, fp16* C, int64_t ldc) {
  gemm_16bit(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename T, typename TC>
void gemm_fp32_a(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const T* B, int64_t ldb, float beta, TC* C,
                 int64_t ldc) {
  const detail::GemmClock clock;
  detail::widened_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#define TESSERA_GEMM_FP32_A(T, TC)                                                            \
  template void gemm_fp32_a<T, TC>(bool, bool, int64_t, int64_t, int64_t, float, const float*, \
                                   int64_t, const T*, int64_t, float, TC*, int64_t);
TESSERA_GEMM_FP32_A(bf16, float)
TESSERA_GEMM_FP32_A(bf16, bf16)
TESSERA_GEMM_FP32_A(fp16, float)
TESSERA_GEMM_FP32_A(fp16, fp16)
#undef TESSERA_GEMM_FP32_A

double gemm_seconds() {
  return 1e-9 * static_cast<double>(detail::g_gemm_nanoseconds.load(std::memory_order_relaxed));
}

bool gemm_widens(DType dtype) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) return false;
  return bf16_gemm_path() == Bf16GemmPath::kWidenToFp32;
}

const char* bf16_gemm_path_name(Bf16GemmPath path) {
  switch (path) {
    case Bf16GemmPath::kOneDnnBf16:
      return "oneDNN bf16";
    case Bf16GemmPath::kPacked:
      return "blocked, widened while packing";
    case Bf16GemmPath::kWidenToFp32:
      return "widened to fp32";
  }
  return "?";
}

}  // namespace tessera::kernels
