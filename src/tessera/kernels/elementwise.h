// Small elementwise kernels used around the layers (residual adds).
#pragma once

#include <cstdint>

namespace tessera::kernels {

// out (n) = a + b, in fp32 then stored as T. out may alias a or b.
template <typename T>
void add(T* out, const T* a, const T* b, int64_t n);

}  // namespace tessera::kernels
