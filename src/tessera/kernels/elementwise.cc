#include "tessera/kernels/elementwise.h"

#include "tessera/core/dtype.h"
#include "tessera/kernels/simd.h"

namespace tessera::kernels {

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for simd if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template void add<float>(float*, const float*, const float*, int64_t);
template void add<bf16>(bf16*, const bf16*, const bf16*, int64_t);
template void add<fp16>(fp16*, const fp16*, const fp16*, int64_t);

template <typename T>
void round_from_f32(T* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = simd::lane_mask(i, n);
    simd::store16(out + i, _mm512_maskz_loadu_ps(k, in + i), k);
  }
}

template void round_from_f32<float>(float*, const float*, int64_t);
template void round_from_f32<bf16>(bf16*, const float*, int64_t);
template void round_from_f32<fp16>(fp16*, const float*, int64_t);

}  // namespace tessera::kernels
