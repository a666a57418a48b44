#include "tessera/kernels/norms.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "tessera/core/dtype.h"
#include "tessera/kernels/simd.h"
#include "tessera/core/error.h"
#include "tessera/core/memory.h"

namespace tessera::kernels {
namespace {

using simd::lane_mask;
using simd::load16;
using simd::store16;

// Below this many elements the OpenMP team is not worth waking.
constexpr int64_t kParallelThreshold = 1 << 14;

// Parameter-gradient reduction over N. Rows are cut into chunks of kRowsPerChunk consecutive
// rows (a constant: the chunking depends on N only, never on the thread count). Each chunk sums
// its rows, in row order, into its own fp32 partial (C); the partials are then added in chunk
// order. So dweight/dbias are bitwise identical for any OMP_NUM_THREADS. The partials cost
// ceil(N/64)·C floats per gradient (1.5% of an fp32 (N,C) activation) and stay in cache while
// a thread works through its chunk.
constexpr int64_t kRowsPerChunk = 64;

// Scratch for the partials, counted by the MemoryAccountant like every other allocation.
class Workspace {
 public:
  explicit Workspace(int64_t floats)
      : bytes_(static_cast<size_t>(floats) * sizeof(float)),
        ptr_(static_cast<float*>(tracked_alloc(bytes_, MemoryCategory::kOther))) {}
  ~Workspace() { tracked_free(ptr_, bytes_, MemoryCategory::kOther); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  float* data() { return ptr_; }

 private:
  size_t bytes_;
  float* ptr_;
};

// Row reductions: sums[k] = sum over the row of the k-th value `step` adds into its accumulator
// array, step(c, mask, acc) being called for every 16-column block. Four independent
// accumulator sets keep the loop from waiting on add latency (a single chain made the forward
// 2x slower); the summation order depends on C only, so results are deterministic.
template <int K, typename Step>
[[gnu::always_inline]] inline void row_reduce(int64_t C, float sums[K], Step step) {
  __m512 acc[4][K];
  for (int u = 0; u < 4; ++u)
    for (int k = 0; k < K; ++k) acc[u][k] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 64 <= C; c += 64)
    for (int u = 0; u < 4; ++u) step(c + 16 * u, static_cast<__mmask16>(0xFFFF), acc[u]);
  // Constant trip count, so acc stays in registers (a runtime index would put it in memory).
  for (int u = 0; u < 4; ++u)
    if (c + 16 * u < C) step(c + 16 * u, lane_mask(c + 16 * u, C), acc[u]);
  for (int k = 0; k < K; ++k) {
    sums[k] = _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_add_ps(acc[0][k], acc[1][k]), _mm512_add_ps(acc[2][k], acc[3][k])));
  }
}

// grad[c] += sum over chunks k (in order) of partial[k*stride + c], c < C.
void add_partials(float* grad, const float* partial, int64_t stride, int64_t num_chunks,
                  int64_t C) {
#pragma omp parallel for schedule(static) if (num_chunks * C > kParallelThreshold)
  for (int64_t c = 0; c < C; c += 16) {
    const __mmask16 m = lane_mask(c, C);
    __m512 s = _mm512_setzero_ps();
    for (int64_t k = 0; k < num_chunks; ++k)
      s = _mm512_add_ps(s, load16(partial + k * stride + c, m));
    _mm512_mask_storeu_ps(grad + c, m, _mm512_add_ps(load16(grad + c, m), s));
  }
}

}  // namespace

template <typename T>
void layer_norm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                        const T* bias, int64_t N, int64_t C, float eps) {
  TESSERA_CHECK(N >= 0 && C > 0);
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (N * C > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T* o = out + n * C;
    // The variance is a second pass over the row (now in L1) around the mean: it avoids the
    // cancellation of E[x^2] - E[x]^2 for rows with a large mean.
    float sum, sum_sq;
    row_reduce<1>(C, &sum, [&](int64_t c, __mmask16 m, __m512* acc) {
      acc[0] = _mm512_add_ps(acc[0], load16(x + c, m));  // masked lanes load 0
    });
    const float mu = sum * inv_c;
    const __m512 vmu = _mm512_set1_ps(mu);
    row_reduce<1>(C, &sum_sq, [&](int64_t c, __mmask16 m, __m512* acc) {
      const __m512 d = _mm512_maskz_sub_ps(m, load16(x + c, m), vmu);
      acc[0] = _mm512_fmadd_ps(d, d, acc[0]);
    });
    const float rs = 1.0f / std::sqrt(sum_sq * inv_c + eps);
    const __m512 vrs = _mm512_set1_ps(rs);
    for (int64_t c = 0; c < C; c += 16) {
      const __mmask16 m = lane_mask(c, C);
      const __m512 norm = _mm512_mul_ps(_mm512_sub_ps(load16(x + c, m), vmu), vrs);
      const __m512 b = bias ? load16(bias + c, m) : _mm512_setzero_ps();
      store16(o + c, _mm512_fmadd_ps(norm, load16(weight + c, m), b), m);
    }
    if (mean) mean[n] = mu;
    if (rstd) rstd[n] = rs;
  }
}

template <typename T>
void layer_norm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                         const T* weight, const float* mean, const float* rstd, int64_t N,
                         int64_t C) {
  TESSERA_CHECK(N >= 0 && C > 0);
  if (N == 0) return;
  const int64_t num_chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  const int64_t per_chunk = dbias ? 2 * C : C;
  Workspace partial(num_chunks * per_chunk);
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (N * C > kParallelThreshold)
  for (int64_t k = 0; k < num_chunks; ++k) {
    float* pw = partial.data() + k * per_chunk;
    float* pb = dbias ? pw + C : nullptr;
    for (int64_t c = 0; c < per_chunk; ++c) pw[c] = 0.0f;
    const int64_t row_end = std::min(N, (k + 1) * kRowsPerChunk);
    for (int64_t n = k * kRowsPerChunk; n < row_end; ++n) {
      const T* x = inp + n * C;
      const T* dy = dout + n * C;
      T* dx = dinp + n * C;
      const __m512 vmu = _mm512_set1_ps(mean[n]);
      const __m512 vrs = _mm512_set1_ps(rstd[n]);
      // dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight.
      float sums[2];  // sum(dnorm), sum(dnorm * norm)
      row_reduce<2>(C, sums, [&](int64_t c, __mmask16 m, __m512* acc) {
        const __m512 norm = _mm512_mul_ps(_mm512_sub_ps(load16(x + c, m), vmu), vrs);
        const __m512 dnorm = _mm512_mul_ps(load16(dy + c, m), load16(weight + c, m));
        acc[0] = _mm512_add_ps(acc[0], dnorm);  // masked lanes: dnorm = 0
        acc[1] = _mm512_fmadd_ps(dnorm, norm, acc[1]);
      });
      const __m512 a = _mm512_set1_ps(sums[0] * inv_c);
      const __m512 b = _mm512_set1_ps(sums[1] * inv_c);
      for (int64_t c = 0; c < C; c += 16) {
        const __mmask16 m = lane_mask(c, C);
        const __m512 norm = _mm512_mul_ps(_mm512_sub_ps(load16(x + c, m), vmu), vrs);
        const __m512 g = load16(dy + c, m);
        const __m512 dnorm = _mm512_mul_ps(g, load16(weight + c, m));
        const __m512 d = _mm512_fnmadd_ps(norm, b, _mm512_sub_ps(dnorm, a));
        store16(dx + c, _mm512_mul_ps(d, vrs), m);
        _mm512_mask_storeu_ps(pw + c, m, _mm512_fmadd_ps(norm, g, load16(pw + c, m)));
        if (pb) _mm512_mask_storeu_ps(pb + c, m, _mm512_add_ps(load16(pb + c, m), g));
      }
    }
  }
  add_partials(dweight, partial.data(), per_chunk, num_chunks, C);
  if (dbias) add_partials(dbias, partial.data() + C, per_chunk, num_chunks, C);
}

template <typename T>
void rms_norm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                      float eps) {
  TESSERA_CHECK(N >= 0 && C > 0);
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (N * C > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    T* o = out + n * C;
    float sum_sq;
    row_reduce<1>(C, &sum_sq, [&](int64_t c, __mmask16 m, __m512* acc) {
      const __m512 v = load16(x + c, m);
      acc[0] = _mm512_fmadd_ps(v, v, acc[0]);
    });
    const float rs = 1.0f / std::sqrt(sum_sq * inv_c + eps);
    const __m512 vrs = _mm512_set1_ps(rs);
    for (int64_t c = 0; c < C; c += 16) {
      const __mmask16 m = lane_mask(c, C);
      store16(o + c, _mm512_mul_ps(_mm512_mul_ps(load16(x + c, m), vrs), load16(weight + c, m)), m);
    }
    if (rstd) rstd[n] = rs;
  }
}

template <typename T>
void rms_norm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                       const float* rstd, int64_t N, int64_t C) {
  TESSERA_CHECK(N >= 0 && C > 0);
  if (N == 0) return;
  const int64_t num_chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  Workspace partial(num_chunks * C);
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (N * C > kParallelThreshold)
  for (int64_t k = 0; k < num_chunks; ++k) {
    float* pw = partial.data() + k * C;
    for (int64_t c = 0; c < C; ++c) pw[c] = 0.0f;
    const int64_t row_end = std::min(N, (k + 1) * kRowsPerChunk);
    for (int64_t n = k * kRowsPerChunk; n < row_end; ++n) {
      const T* x = inp + n * C;
      const T* dy = dout + n * C;
      T* dx = dinp + n * C;
      const __m512 vrs = _mm512_set1_ps(rstd[n]);
      // dx = rstd * (dnorm - norm * mean(dnorm * norm)), norm = x * rstd, dnorm = dout * weight.
      float sum_dnorm_norm;
      row_reduce<1>(C, &sum_dnorm_norm, [&](int64_t c, __mmask16 m, __m512* acc) {
        const __m512 norm = _mm512_mul_ps(load16(x + c, m), vrs);
        const __m512 dnorm = _mm512_mul_ps(load16(dy + c, m), load16(weight + c, m));
        acc[0] = _mm512_fmadd_ps(dnorm, norm, acc[0]);
      });
      const __m512 b = _mm512_set1_ps(sum_dnorm_norm * inv_c);
      for (int64_t c = 0; c < C; c += 16) {
        const __mmask16 m = lane_mask(c, C);
        const __m512 norm = _mm512_mul_ps(load16(x + c, m), vrs);
        const __m512 g = load16(dy + c, m);
        const __m512 dnorm = _mm512_mul_ps(g, load16(weight + c, m));
        store16(dx + c, _mm512_mul_ps(_mm512_fnmadd_ps(norm, b, dnorm), vrs), m);
        _mm512_mask_storeu_ps(pw + c, m, _mm512_fmadd_ps(norm, g, load16(pw + c, m)));
      }
    }
  }
  add_partials(dweight, partial.data(), C, num_chunks, C);
}

template void layer_norm_forward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, int64_t, int64_t, float);
template void layer_norm_forward<bf16>(bf16*, float*, float*, const bf16*, const bf16*, const bf16*,
                                       int64_t, int64_t, float);
template void layer_norm_backward<float>(float*, float*, float*, const float*, const float*,
                                         const float*, const float*, const float*, int64_t,
                                         int64_t);
template void layer_norm_backward<bf16>(bf16*, float*, float*, const bf16*, const bf16*,
                                        const bf16*, const float*, const float*, int64_t, int64_t);
template void rms_norm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t,
                                      float);
template void rms_norm_forward<bf16>(bf16*, float*, const bf16*, const bf16*, int64_t, int64_t,
                                     float);
template void rms_norm_backward<float>(float*, float*, const float*, const float*, const float*,
                                       const float*, int64_t, int64_t);
template void rms_norm_backward<bf16>(bf16*, float*, const bf16*, const bf16*, const bf16*,
                                      const float*, int64_t, int64_t);
template void layer_norm_forward<fp16>(fp16*, float*, float*, const fp16*, const fp16*, const fp16*,
                                       int64_t, int64_t, float);
template void layer_norm_backward<fp16>(fp16*, float*, float*, const fp16*, const fp16*,
                                        const fp16*, const float*, const float*, int64_t, int64_t);
template void rms_norm_forward<fp16>(fp16*, float*, const fp16*, const fp16*, int64_t, int64_t,
                                     float);
template void rms_norm_backward<fp16>(fp16*, float*, const fp16*, const fp16*, const fp16*,
                                      const float*, int64_t, int64_t);

}  // namespace tessera::kernels
