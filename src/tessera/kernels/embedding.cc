#include "tessera/kernels/embedding.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "tessera/core/dtype.h"
#include "tessera/kernels/simd.h"
#include "tessera/core/error.h"

namespace tessera::kernels {
namespace {

using simd::lane_mask;
using simd::load16;
using simd::store16;

constexpr int64_t kParallelThreshold = 1 << 14;

// dst[c] += src[c] for c in [c_begin, c_end) (c_begin a multiple of 16), row length C.
template <typename T>
inline void add_row(float* dst, const T* src, int64_t c_begin, int64_t c_end, int64_t C) {
  for (int64_t c = c_begin; c < c_end; c += 16) {
    const __mmask16 m = lane_mask(c, C);
    _mm512_mask_storeu_ps(dst + c, m, _mm512_add_ps(load16(dst + c, m), load16(src + c, m)));
  }
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const int32_t* positions, const T* wte,
                       const T* wpe, int64_t N, int64_t C, int64_t vocab_start, int64_t V) {
  TESSERA_CHECK(N >= 0 && C > 0 && V >= 0);
  TESSERA_CHECK(wpe == nullptr || positions != nullptr);
#pragma omp parallel for schedule(static) if (N * C > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = static_cast<int64_t>(tokens[n]) - vocab_start;
    const T* w = (row >= 0 && row < V) ? wte + row * C : nullptr;
    const T* p = wpe ? wpe + static_cast<int64_t>(positions[n]) * C : nullptr;
    T* o = out + n * C;
    for (int64_t c = 0; c < C; c += 16) {
      const __mmask16 m = lane_mask(c, C);
      // Only add when both rows exist, so a lone row is copied bit for bit (keeps -0.0).
      __m512 v = w ? load16(w + c, m) : _mm512_setzero_ps();
      if (p) v = w ? _mm512_add_ps(v, load16(p + c, m)) : load16(p + c, m);
      store16(o + c, v, m);
    }
  }
}

template <typename T>
void position_embedding_forward(T* out, const int32_t* positions, const T* wpe, int64_t N,
                                int64_t C) {
  TESSERA_CHECK(N >= 0 && C > 0);
#pragma omp parallel for schedule(static) if (N * C > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    const T* p = wpe + static_cast<int64_t>(positions[n]) * C;
    T* o = out + n * C;
    for (int64_t c = 0; c < C; c += 16) {
      const __mmask16 m = lane_mask(c, C);
      store16(o + c, _mm512_add_ps(load16(o + c, m), load16(p + c, m)), m);
    }
  }
}

// Parallelised over columns: each thread owns a fixed slice of C and walks all N tokens in
// order, adding into its columns of dwte/dwpe. No two threads touch the same element (no
// atomics or locks), and every element receives its additions in token order n = 0..N-1, so
// the result is bitwise identical to a serial loop for any thread count. Each thread reads its
// contiguous C/threads slice of every dout row.
template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                        const int32_t* positions, int64_t N, int64_t C, int64_t vocab_start,
                        int64_t V) {
  TESSERA_CHECK(N >= 0 && C > 0 && V >= 0);
  TESSERA_CHECK(dwpe == nullptr || positions != nullptr);
  TESSERA_CHECK(dwte == nullptr || tokens != nullptr);
  const int64_t blocks = (C + 15) / 16;
#pragma omp parallel if (N * C > kParallelThreshold)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t c_begin = blocks * t / threads * 16;
    const int64_t c_end = std::min(C, blocks * (t + 1) / threads * 16);
    if (c_begin < c_end) {
      for (int64_t n = 0; n < N; ++n) {
        const T* g = dout + n * C;
        if (dwte) {
          const int64_t row = static_cast<int64_t>(tokens[n]) - vocab_start;
          if (row >= 0 && row < V) add_row(dwte + row * C, g, c_begin, c_end, C);
        }
        if (dwpe) add_row(dwpe + static_cast<int64_t>(positions[n]) * C, g, c_begin, c_end, C);
      }
    }
  }
}

template void position_embedding_forward<float>(float*, const int32_t*, const float*, int64_t,
                                                int64_t);
template void position_embedding_forward<bf16>(bf16*, const int32_t*, const bf16*, int64_t,
                                               int64_t);
template void position_embedding_forward<fp16>(fp16*, const int32_t*, const fp16*, int64_t,
                                               int64_t);
template void embedding_forward<float>(float*, const int32_t*, const int32_t*, const float*,
                                       const float*, int64_t, int64_t, int64_t, int64_t);
template void embedding_forward<bf16>(bf16*, const int32_t*, const int32_t*, const bf16*,
                                      const bf16*, int64_t, int64_t, int64_t, int64_t);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*,
                                        const int32_t*, int64_t, int64_t, int64_t, int64_t);
template void embedding_backward<bf16>(float*, float*, const bf16*, const int32_t*, const int32_t*,
                                       int64_t, int64_t, int64_t, int64_t);
template void embedding_forward<fp16>(fp16*, const int32_t*, const int32_t*, const fp16*,
                                      const fp16*, int64_t, int64_t, int64_t, int64_t);
template void embedding_backward<fp16>(float*, float*, const fp16*, const int32_t*, const int32_t*,
                                       int64_t, int64_t, int64_t, int64_t);

}  // namespace tessera::kernels
