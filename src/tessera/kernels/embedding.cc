// Token and position embeddings (contract in embedding.h), compiled once per CPU target.
#include "tessera/kernels/embedding.h"

#include <omp.h>

#include <algorithm>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

constexpr int64_t kParallelThreshold = 1 << 14;

// dst[c] += src[c] for c in [c_begin, c_end) (c_begin a multiple of 16; c_end one too, or the
// row length C).
template <typename T>
inline void add_row(float* dst, const T* src, int64_t c_begin, int64_t c_end) {
  for_each_block(c_begin, c_end, [=](int64_t c, int lanes) {
    store(dst + c, load(dst + c, lanes) + load(src + c, lanes), lanes);
  });
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
    for_each_block(0, C, [=](int64_t c, int lanes) {
      // Only add when both rows exist, so a lone row is copied bit for bit (keeps -0.0).
      VecF v = w ? load(w + c, lanes) : zero();
      if (p) v = w ? v + load(p + c, lanes) : load(p + c, lanes);
      store(o + c, v, lanes);
    });
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
    for_each_block(0, C, [=](int64_t c, int lanes) {
      store(o + c, load(o + c, lanes) + load(p + c, lanes), lanes);
    });
  }
}

// Parallelised over columns: each thread owns a fixed slice of C (whole 16-column blocks) and
// walks all N tokens in order, adding into its columns of dwte/dwpe. No two threads touch the
// same element (no atomics or locks), and every element receives its additions in token order
// n = 0..N-1, so the result is bitwise identical to a serial loop for any thread count. Each
// thread reads its contiguous C/threads slice of every dout row.
template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                        const int32_t* positions, int64_t N, int64_t C, int64_t vocab_start,
                        int64_t V) {
  TESSERA_CHECK(N >= 0 && C > 0 && V >= 0);
  TESSERA_CHECK(dwpe == nullptr || positions != nullptr);
  TESSERA_CHECK(dwte == nullptr || tokens != nullptr);
  const int64_t blocks = (C + kLanes - 1) / kLanes;
#pragma omp parallel if (N * C > kParallelThreshold)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t c_begin = blocks * t / threads * kLanes;
    const int64_t c_end = std::min(C, blocks * (t + 1) / threads * kLanes);
    if (c_begin < c_end) {
      for (int64_t n = 0; n < N; ++n) {
        const T* g = dout + n * C;
        if (dwte) {
          const int64_t row = static_cast<int64_t>(tokens[n]) - vocab_start;
          if (row >= 0 && row < V) add_row(dwte + row * C, g, c_begin, c_end);
        }
        if (dwpe) add_row(dwpe + static_cast<int64_t>(positions[n]) * C, g, c_begin, c_end);
      }
    }
  }
}

void register_embedding() {
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::embedding_forward<T>>(kThisTarget, &embedding_forward<T>);
    register_kernel<&kernels::position_embedding_forward<T>>(kThisTarget,
                                                             &position_embedding_forward<T>);
    register_kernel<&kernels::embedding_backward<T>>(kThisTarget, &embedding_backward<T>);
  });
}

TESSERA_TARGET_END
