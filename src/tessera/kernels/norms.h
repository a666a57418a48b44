// LayerNorm and RMSNorm over the last dimension (C), fp32 statistics.
#pragma once

#include <cstdint>

#include "tessera/kernels/dispatch.h"
#include "tessera/kernels/scratch_plan.h"

namespace tessera::kernels {

// The backward passes reduce the parameter gradients over N in chunks of this many consecutive
// rows (a constant: the chunking depends on N only, never on the thread count), each chunk into
// its own fp32 partial sums, added in chunk order (norms.cc).
constexpr int64_t kNormRowsPerChunk = 64;

// Floats of those partial sums for N rows of C: the weight's (and with `bias` the bias')
// gradient per chunk. A temporary of the backward call, accounted as MemoryCategory::kOther.
inline int64_t norm_backward_partial_floats(int64_t N, int64_t C, bool bias) {
  return (N + kNormRowsPerChunk - 1) / kNormRowsPerChunk * (bias ? 2 * C : C);
}

// Records that temporary in `plan` (scratch_plan.h): layer_norm_backward's (bias: with a bias
// gradient) or rms_norm_backward's (no bias).
inline void plan_norm_backward(ScratchPlan& plan, int64_t N, int64_t C, bool bias) {
  if (N > 0) plan.temporary(4 * norm_backward_partial_floats(N, C, bias));
}

// out, inp (N,C); weight, bias (C) (bias may be nullptr); mean, rstd (N) fp32, saved for backward.
template <typename T>
void layer_norm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                        const T* bias, int64_t N, int64_t C, float eps) {
  dispatch<&layer_norm_forward<T>>(out, mean, rstd, inp, weight, bias, N, C, eps);
}
// dinp (N,C) overwritten; dweight, dbias (C) fp32 accumulated (dbias nullptr when no bias).
template <typename T>
void layer_norm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                         const T* weight, const float* mean, const float* rstd, int64_t N,
                         int64_t C) {
  dispatch<&layer_norm_backward<T>>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

// RMSNorm (LLaMA): out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps). rstd (N) saved.
template <typename T>
void rms_norm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                      float eps) {
  dispatch<&rms_norm_forward<T>>(out, rstd, inp, weight, N, C, eps);
}
template <typename T>
void rms_norm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                       const float* rstd, int64_t N, int64_t C) {
  dispatch<&rms_norm_backward<T>>(dinp, dweight, dout, inp, weight, rstd, N, C);
}

}  // namespace tessera::kernels
