// Pointwise activations: GELU (tanh approximation, GPT-2's "gelu_new") and SwiGLU.
#pragma once

#include <cstdint>

#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

// out, inp (n); out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  dispatch<&gelu_forward<T>>(out, inp, n);
}
// dinp (n) overwritten; dinp may alias dout.
template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
  dispatch<&gelu_backward<T>>(dinp, dout, inp, n);
}

// SwiGLU over a fused projection: inp (N, 2F) holds [gate | up] per row (gate columns first).
// out (N,F) = silu(gate) * up, silu(x) = x * sigmoid(x).
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F) {
  dispatch<&swiglu_forward<T>>(out, inp, N, F);
}
// dinp (N, 2F) overwritten ([dgate | dup]); dout (N,F).
template <typename T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, int64_t N, int64_t F) {
  dispatch<&swiglu_backward<T>>(dinp, dout, inp, N, F);
}

}  // namespace tessera::kernels
