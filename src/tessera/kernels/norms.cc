// LayerNorm and RMSNorm (contract in norms.h), compiled once per CPU target.
#include "tessera/kernels/norms.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/memory.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

// Below this many elements the OpenMP team is not worth waking.
constexpr int64_t kParallelThreshold = 1 << 14;

// Parameter-gradient reduction over N (norms.h): each chunk of kNormRowsPerChunk rows sums its
// rows, in row order, into its own fp32 partial (C); the partials are then added in chunk order.
// So dweight/dbias are bitwise identical for any OMP_NUM_THREADS. The partials cost
// ceil(N/64)·C floats per gradient (1.5% of an fp32 (N,C) activation) and stay in cache while
// a thread works through its chunk.
constexpr int64_t kRowsPerChunk = kNormRowsPerChunk;

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
// array, step(c, lanes, acc) being called for every 16-column block (lanes = the columns of the
// block inside the row, 16 but in the last one). Four independent accumulator sets keep the
// loop from waiting on add latency (a single chain made the forward 2x slower); the summation
// order depends on C only, so results are deterministic.
template <int K, typename Step>
[[gnu::always_inline]] inline void row_reduce(int64_t C, float sums[K], Step step) {
  VecF acc[4][K];
  for (int u = 0; u < 4; ++u)
    for (int k = 0; k < K; ++k) acc[u][k] = zero();
  int64_t c = 0;
  for (; c + 4 * kLanes <= C; c += 4 * kLanes)
    for (int u = 0; u < 4; ++u) step(c + kLanes * u, kLanes, acc[u]);
  // Constant trip count, so acc stays in registers (a runtime index would put it in memory).
  for (int u = 0; u < 4; ++u)
    if (c + kLanes * u < C) step(c + kLanes * u, lanes_left(c + kLanes * u, C), acc[u]);
  for (int k = 0; k < K; ++k)
    sums[k] = reduce_add((acc[0][k] + acc[1][k]) + (acc[2][k] + acc[3][k]));
}

// grad[c] += sum over chunks k (in order) of partial[k*stride + c], c < C.
void add_partials(float* grad, const float* partial, int64_t stride, int64_t num_chunks,
                  int64_t C) {
  const auto column_block = [grad, partial, stride, num_chunks](int64_t c, int lanes) {
    VecF s = zero();
    for (int64_t k = 0; k < num_chunks; ++k) s = s + load(partial + k * stride + c, lanes);
    store(grad + c, load(grad + c, lanes) + s, lanes);
  };
  const int64_t full = C / kLanes * kLanes;
#pragma omp parallel for schedule(static) if (num_chunks * C > kParallelThreshold)
  for (int64_t c = 0; c < full; c += kLanes) column_block(c, kLanes);
  if (full < C) column_block(full, static_cast<int>(C - full));
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
    row_reduce<1>(C, &sum, [=](int64_t c, int lanes, VecF* acc) {
      acc[0] = acc[0] + load(x + c, lanes);  // lanes past the row load 0
    });
    const float mu = sum * inv_c;
    const VecF vmu = splat(mu);
    row_reduce<1>(C, &sum_sq, [=](int64_t c, int lanes, VecF* acc) {
      // Lanes past the row would hold 0 - mu: zeroed, they add nothing.
      const VecF d = zero_unless(first_n(lanes), load(x + c, lanes) - vmu);
      acc[0] = fmadd(d, d, acc[0]);
    });
    const float rs = 1.0f / std::sqrt(sum_sq * inv_c + eps);
    const VecF vrs = splat(rs);
    for_each_block(0, C, [=](int64_t c, int lanes) {
      const VecF norm = (load(x + c, lanes) - vmu) * vrs;
      const VecF b = bias ? load(bias + c, lanes) : zero();
      store(o + c, fmadd(norm, load(weight + c, lanes), b), lanes);
    });
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
  Workspace partial(norm_backward_partial_floats(N, C, dbias != nullptr));
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
      const VecF vmu = splat(mean[n]);
      const VecF vrs = splat(rstd[n]);
      // dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight.
      float sums[2];  // sum(dnorm), sum(dnorm * norm)
      row_reduce<2>(C, sums, [=](int64_t c, int lanes, VecF* acc) {
        const VecF norm = (load(x + c, lanes) - vmu) * vrs;
        const VecF dnorm = load(dy + c, lanes) * load(weight + c, lanes);
        acc[0] = acc[0] + dnorm;  // lanes past the row: dnorm = 0
        acc[1] = fmadd(dnorm, norm, acc[1]);
      });
      const VecF a = splat(sums[0] * inv_c);
      const VecF b = splat(sums[1] * inv_c);
      for_each_block(0, C, [=](int64_t c, int lanes) {
        const VecF norm = (load(x + c, lanes) - vmu) * vrs;
        const VecF g = load(dy + c, lanes);
        const VecF dnorm = g * load(weight + c, lanes);
        const VecF d = fnmadd(norm, b, dnorm - a);
        store(dx + c, d * vrs, lanes);
        store(pw + c, fmadd(norm, g, load(pw + c, lanes)), lanes);
        if (pb) store(pb + c, load(pb + c, lanes) + g, lanes);
      });
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
    row_reduce<1>(C, &sum_sq, [=](int64_t c, int lanes, VecF* acc) {
      const VecF v = load(x + c, lanes);
      acc[0] = fmadd(v, v, acc[0]);
    });
    const float rs = 1.0f / std::sqrt(sum_sq * inv_c + eps);
    const VecF vrs = splat(rs);
    for_each_block(0, C, [=](int64_t c, int lanes) {
      store(o + c, (load(x + c, lanes) * vrs) * load(weight + c, lanes), lanes);
    });
    if (rstd) rstd[n] = rs;
  }
}

template <typename T>
void rms_norm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                       const float* rstd, int64_t N, int64_t C) {
  TESSERA_CHECK(N >= 0 && C > 0);
  if (N == 0) return;
  const int64_t num_chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  Workspace partial(norm_backward_partial_floats(N, C, false));
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
      const VecF vrs = splat(rstd[n]);
      // dx = rstd * (dnorm - norm * mean(dnorm * norm)), norm = x * rstd, dnorm = dout * weight.
      float sum_dnorm_norm;
      row_reduce<1>(C, &sum_dnorm_norm, [=](int64_t c, int lanes, VecF* acc) {
        const VecF norm = load(x + c, lanes) * vrs;
        const VecF dnorm = load(dy + c, lanes) * load(weight + c, lanes);
        acc[0] = fmadd(dnorm, norm, acc[0]);
      });
      const VecF b = splat(sum_dnorm_norm * inv_c);
      for_each_block(0, C, [=](int64_t c, int lanes) {
        const VecF norm = load(x + c, lanes) * vrs;
        const VecF g = load(dy + c, lanes);
        const VecF dnorm = g * load(weight + c, lanes);
        store(dx + c, fnmadd(norm, b, dnorm) * vrs, lanes);
        store(pw + c, fmadd(norm, g, load(pw + c, lanes)), lanes);
      });
    }
  }
  add_partials(dweight, partial.data(), C, num_chunks, C);
}

void register_norms() {
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::layer_norm_forward<T>>(kThisTarget, &layer_norm_forward<T>);
    register_kernel<&kernels::layer_norm_backward<T>>(kThisTarget, &layer_norm_backward<T>);
    register_kernel<&kernels::rms_norm_forward<T>>(kThisTarget, &rms_norm_forward<T>);
    register_kernel<&kernels::rms_norm_backward<T>>(kThisTarget, &rms_norm_backward<T>);
  });
}

TESSERA_TARGET_END
