// Linear layer: out = inp @ weight^T + bias, weight stored (OC, C) like torch.nn.Linear.
#pragma once

#include <cstdint>

#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

class ScratchPlan;

// out (N,OC); inp (N,C); weight (OC,C); bias (OC) or nullptr. Inside a ScopedGemvLinear (gemv.h:
// inference), up to kGemvMaxRows rows (a decode step) run on gemv.h's matrix-vector kernel, which
// streams the weights once (fp32 sums, the bias added before the one rounding to T); everything
// else on gemm.h.
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                    int64_t OC) {
  dispatch<&linear_forward<T>>(out, inp, weight, bias, N, C, OC);
}

// dinp (N,C) overwritten, may be nullptr (not needed);
// dweight (OC,C) fp32 accumulated (+=); dbias (OC) fp32 accumulated, nullptr when no bias;
// dout (N,OC); inp (N,C); weight (OC,C).
template <typename T>
void linear_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                     const T* weight, int64_t N, int64_t C, int64_t OC) {
  dispatch<&linear_backward<T>>(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

// Record in `plan` (scratch_plan.h) the scratch linear_forward / linear_backward take for these
// shapes of `dtype` on a team of `threads`: their products' (gemm.h plan_gemm) and the fp32 copy
// a 16-bit layer takes where products are widened. `dinp`: the input gradient is asked for.
inline void plan_linear_forward(ScratchPlan& plan, DType dtype, int64_t N, int64_t C, int64_t OC,
                                bool bias, int threads) {
  dispatch<&plan_linear_forward>(plan, dtype, N, C, OC, bias, threads);
}
inline void plan_linear_backward(ScratchPlan& plan, DType dtype, int64_t N, int64_t C, int64_t OC,
                                 bool dinp, int threads) {
  dispatch<&plan_linear_backward>(plan, dtype, N, C, OC, dinp, threads);
}

// out (N,OC) += bias (OC), in fp32, stored as T (a row-parallel layer adds its bias after the
// reduction of the partial products).
template <typename T>
void bias_forward(T* out, const T* bias, int64_t N, int64_t OC) {
  dispatch<&bias_forward<T>>(out, bias, N, OC);
}
// dbias (OC) fp32 += sum over the N rows of dout (N,OC).
template <typename T>
void bias_backward(float* dbias, const T* dout, int64_t N, int64_t OC) {
  dispatch<&bias_backward<T>>(dbias, dout, N, OC);
}

}  // namespace tessera::kernels
