// Small elementwise kernels used around the layers (residual adds) and the optimizer.
#pragma once

#include <cstdint>

#include "tessera/core/fp8.h"
#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

// out (n) = a + b, in fp32 then stored as T. out may alias a or b.
template <typename T>
void add(T* out, const T* a, const T* b, int64_t n) {
  dispatch<&add<T>>(out, a, b, n);
}

// out (n) = in rounded to T exactly as the optimizer's step stores its results (the same
// vector conversion of the active target), so values restored from fp32 master weights equal
// the ones a step would have written.
template <typename T>
void round_from_f32(T* out, const float* in, int64_t n) {
  dispatch<&round_from_f32<T>>(out, in, n);
}

// out (n) = in widened to fp32 (exact): the storage types, and the 8-bit floats of core/fp8.h
// (a KV cache's). Runs in parallel above a size threshold.
template <typename T>
void widen_to_f32(float* out, const T* in, int64_t n) {
  dispatch<&widen_to_f32<T>>(out, in, n);
}

// out (n) = exp(in), by the vectorised exp that softmax, cross-entropy and the activations use
// (fast_exp.h: at most 2 ulp from the correctly rounded value). Single-threaded.
inline void exp_f32(float* out, const float* in, int64_t n) { dispatch<&exp_f32>(out, in, n); }

}  // namespace tessera::kernels
