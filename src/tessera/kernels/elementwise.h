// Small elementwise kernels used around the layers (residual adds) and the optimizer.
#pragma once

#include <cstdint>

namespace tessera::kernels {

// out (n) = a + b, in fp32 then stored as T. out may alias a or b.
template <typename T>
void add(T* out, const T* a, const T* b, int64_t n);

// out (n) = in rounded to T exactly as the optimizer's step stores its results (the AVX-512
// conversion instructions), so values restored from fp32 master weights equal the ones a step
// would have written.
template <typename T>
void round_from_f32(T* out, const float* in, int64_t n);

}  // namespace tessera::kernels
