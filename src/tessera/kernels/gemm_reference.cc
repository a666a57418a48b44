// The GEMM of builds without oneDNN (TESSERA_WITHOUT_ONEDNN: the arm64 kernels-only build,
// scripts/test-arm64.sh): plain loops with fp32 accumulation in k order, so every kernel that
// calls gemm (linear) builds and is tested there. Correct, not fast: the full build always uses
// oneDNN (gemm.cc). 16-bit operands take the blocked GEMM (gemm_packed.h) as on CPUs without
// bf16 dot products in the full build, or the widened path when it is selected.
#if defined(TESSERA_WITHOUT_ONEDNN)

#include <algorithm>
#include <atomic>

#include "tessera/core/error.h"
#include "tessera/kernels/gemm.h"
#include "tessera/kernels/gemm_clock.h"
#include "tessera/kernels/gemm_widened.h"

namespace tessera::kernels {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const detail::GemmClock clock;
  TESSERA_CHECK(M >= 0 && N >= 0 && K >= 0);
  TESSERA_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K));
  TESSERA_CHECK(ldb >= std::max<int64_t>(1, trans_b ? K : N));
  TESSERA_CHECK(ldc >= std::max<int64_t>(1, N));
#pragma omp parallel for schedule(static) if (M * N * K > (int64_t{1} << 18))
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k)
        acc += (trans_a ? A[k * lda + m] : A[m * lda + k]) * (trans_b ? B[n * ldb + k] : B[k * ldb + n]);
      float& c = C[m * ldc + n];
      c = beta == 0.0f ? alpha * acc : alpha * acc + beta * c;  // beta 0: C is not read
    }
  }
}

namespace detail {

// Never called: bf16_gemm_path() below is never kOneDnnBf16 here.
template <typename TC>
void native_bf16_gemm(bool, bool, int64_t, int64_t, int64_t, float, const bf16*, int64_t,
                      const bf16*, int64_t, float, TC*, int64_t) {
  throw Error("this build has no oneDNN bf16 matmul");
}
template void native_bf16_gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const bf16*,
                                      int64_t, const bf16*, int64_t, float, float*, int64_t);
template void native_bf16_gemm<bf16>(bool, bool, int64_t, int64_t, int64_t, float, const bf16*,
                                     int64_t, const bf16*, int64_t, float, bf16*, int64_t);

// The loops above take no scratch.
void plan_onednn_gemm(ScratchPlan&, const GemmShape&) {}
size_t onednn_primitives_cached() { return 0; }
void set_kept_primitives(size_t) {}

}  // namespace detail

// The blocked GEMM unless the widened path is selected (for comparisons).
std::atomic<int> g_path{static_cast<int>(Bf16GemmPath::kPacked)};

Bf16GemmPath bf16_gemm_path() { return static_cast<Bf16GemmPath>(g_path.load()); }

void set_bf16_gemm_path(Bf16GemmPath path) {
  if (path == Bf16GemmPath::kOneDnnBf16) throw Error("this build has no oneDNN bf16 matmul");
  g_path.store(static_cast<int>(path));
}

}  // namespace tessera::kernels

#endif  // TESSERA_WITHOUT_ONEDNN
