// LayerNorm and RMSNorm over the last dimension (C), fp32 statistics.
#pragma once

#include <cstdint>

#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

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
