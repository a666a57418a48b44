// Fused softmax cross-entropy (contract in cross_entropy.h), compiled once per CPU target.
#include "tessera/kernels/cross_entropy.h"

#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/fast_exp.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

// d[begin, end) = 0.
template <typename T>
void zero_columns(T* d, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; i += kLanes) store(d + i, zero(), lanes_left(i, end));
}

template <typename T>
float row_max(const T* x, int64_t V_real) {
  const VecF neg_inf = splat(-std::numeric_limits<float>::infinity());
  // Four independent accumulators hide the max latency.
  VecF m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
  int64_t i = 0;
  for (; i + 4 * kLanes <= V_real; i += 4 * kLanes) {
    m0 = max(m0, load(x + i));
    m1 = max(m1, load(x + i + kLanes));
    m2 = max(m2, load(x + i + 2 * kLanes));
    m3 = max(m3, load(x + i + 3 * kLanes));
  }
  for (; i < V_real; i += kLanes) {
    const int lanes = lanes_left(i, V_real);
    // Lanes past the row keep their accumulator.
    m0 = select(first_n(lanes), max(m0, load(x + i, lanes)), m0);
  }
  return reduce_max(max(max(m0, m1), max(m2, m3)));
}

// Sum of exp(x - max) over the row; also stores every exp into e when e is not null. e may
// alias x (float rows whose gradient overwrites the logits).
template <typename T>
float row_sum_exp(float* e, const T* x, float max, int64_t V_real) {
  const VecF vmax = splat(max);
  VecF s0 = zero(), s1 = zero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= V_real; i += 2 * kLanes) {
    const VecF e0 = fast_exp(load(x + i) - vmax);
    const VecF e1 = fast_exp(load(x + i + kLanes) - vmax);
    if (e) {
      store(e + i, e0);
      store(e + i + kLanes, e1);
    }
    s0 = s0 + e0;
    s1 = s1 + e1;
  }
  for (; i < V_real; i += kLanes) {
    const int lanes = lanes_left(i, V_real);
    const VecF ev = fast_exp(load(x + i, lanes) - vmax);
    if (e) store(e + i, ev, lanes);
    // Lanes past the row keep their sum.
    s0 = select(first_n(lanes), s0 + ev, s0);
  }
  return reduce_add(s0 + s1);
}

// One row: returns the (unmasked) loss and, when d is not null, writes d = coef * e / sum with
// coef subtracted at the target and zeros in the padded columns. `scratch` holds V_real fp32
// values for storage types narrower than fp32.
template <typename T>
float row_forward_backward(T* d, const T* x, int32_t target, float coef, int64_t V, int64_t V_real,
                           float* scratch) {
  // Read the target logit before anything can overwrite the row (d may alias x).
  const float x_target = to_f32(x[target]);
  const float max = row_max(x, V_real);
  float* e = nullptr;
  if (d) {
    if constexpr (std::is_same_v<T, float>) {
      e = d;  // the gradient buffer doubles as the exp buffer: one fewer pass over memory
    } else {
      e = scratch;
    }
  }
  const float sum = row_sum_exp(e, x, max, V_real);
  const float loss = static_cast<float>(std::log(double(sum)) + double(max) - double(x_target));
  if (!d) return loss;

  const float inv = coef / sum;
  // Taken before the scaling pass, which overwrites e when e is d. From the fp32 exp, so the
  // target entry of a bf16 gradient is rounded only once.
  const float d_target = e[target] * inv - coef;
  const VecF vinv = splat(inv);
  int64_t i = 0;
  for (; i + kLanes <= V_real; i += kLanes) store(d + i, load(e + i) * vinv);
  if (i < V_real) {
    const int lanes = lanes_left(i, V_real);
    store(d + i, load(e + i, lanes) * vinv, lanes);
  }
  d[target] = from_f32<T>(d_target);
  zero_columns(d, V_real, V);
  return loss;
}

}  // namespace

template <typename T>
void cross_entropy_forward_backward(float* losses, T* dlogits, const T* logits,
                                    const int32_t* targets, const float* loss_mask, int64_t N,
                                    int64_t V, int64_t V_real, float grad_scale) {
  TESSERA_CHECK(N >= 0 && V_real > 0 && V_real <= V);
  const bool need_scratch = dlogits != nullptr && !std::is_same_v<T, float>;
  // Tiny problems (tests, toy vocabularies) are cheaper on the calling thread than a fork/join.
  constexpr int64_t kParallelThreshold = 1 << 15;
#pragma omp parallel if (N * V >= kParallelThreshold)
  {
    // Per-thread fp32 exp buffer (one vocabulary row, ~200 KB at V = 50304: stays in L2).
    std::unique_ptr<float[]> scratch(need_scratch ? new float[V_real] : nullptr);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float mask = loss_mask ? loss_mask[n] : 1.0f;
      T* d = dlogits ? dlogits + n * V : nullptr;
      if (mask == 0.0f) {
        // Masked rows are not read at all (their logits and target may be anything).
        losses[n] = 0.0f;
        if (d) zero_columns(d, 0, V);
        continue;
      }
      const int32_t target = targets[n];
      TESSERA_CHECK_MSG(target >= 0 && target < V_real, "cross-entropy target out of range");
      const float loss = row_forward_backward(d, logits + n * V, target, mask * grad_scale, V,
                                              V_real, scratch.get());
      losses[n] = mask * loss;
    }
  }
}

// The vocabulary-split passes: the same row loops, one row per iteration of the team.
constexpr int64_t kShardParallelThreshold = 1 << 15;

bool row_masked(const float* loss_mask, int64_t n) { return loss_mask && loss_mask[n] == 0.0f; }

template <typename T>
void cross_entropy_shard_max(float* out, const T* logits, const float* loss_mask, int64_t N,
                             int64_t V_local, int64_t R) {
  TESSERA_CHECK(N >= 0 && R >= 0 && R <= V_local);
#pragma omp parallel for schedule(static) if (N * V_local >= kShardParallelThreshold)
  for (int64_t n = 0; n < N; ++n)
    out[n] = row_masked(loss_mask, n) ? 0.0f : row_max(logits + n * V_local, R);
}

template <typename T>
void cross_entropy_shard_sum_exp(float* out, const T* logits, const float* max,
                                 const float* loss_mask, int64_t N, int64_t V_local, int64_t R) {
  TESSERA_CHECK(N >= 0 && R >= 0 && R <= V_local);
#pragma omp parallel for schedule(static) if (N * V_local >= kShardParallelThreshold)
  for (int64_t n = 0; n < N; ++n)
    out[n] = row_masked(loss_mask, n)
                 ? 0.0f
                 : row_sum_exp(static_cast<float*>(nullptr), logits + n * V_local, max[n], R);
}

template <typename T>
void cross_entropy_shard_gradient(T* dlogits, const T* logits, const float* max, const float* scale,
                                  const float* coef, const int32_t* targets, int64_t vocab_start,
                                  const float* loss_mask, int64_t N, int64_t V_local, int64_t R) {
  TESSERA_CHECK(N >= 0 && R >= 0 && R <= V_local);
#pragma omp parallel for schedule(static) if (N * V_local >= kShardParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    T* d = dlogits + n * V_local;
    if (row_masked(loss_mask, n)) {
      zero_columns(d, 0, V_local);
      continue;
    }
    const T* x = logits + n * V_local;
    const VecF vmax = splat(max[n]), vscale = splat(scale[n]);
    // The target's fp32 value, taken before the row is overwritten (d may alias x).
    const int64_t t = targets[n] - vocab_start;
    const bool owns_target = t >= 0 && t < R;
    float d_target = 0.0f;
    if (owns_target) {
      float lanes[kLanes];
      store(lanes, fast_exp(splat(to_f32(x[t])) - vmax) * vscale);
      d_target = lanes[0] - coef[n];
    }
    int64_t i = 0;
    for (; i + kLanes <= R; i += kLanes) store(d + i, fast_exp(load(x + i) - vmax) * vscale);
    if (i < R) {
      const int lanes = lanes_left(i, R);
      store(d + i, fast_exp(load(x + i, lanes) - vmax) * vscale, lanes);
    }
    if (owns_target) d[t] = from_f32<T>(d_target);
    zero_columns(d, R, V_local);
  }
}

void register_cross_entropy() {
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::cross_entropy_forward_backward<T>>(
        kThisTarget, &cross_entropy_forward_backward<T>);
    register_kernel<&kernels::cross_entropy_shard_max<T>>(kThisTarget, &cross_entropy_shard_max<T>);
    register_kernel<&kernels::cross_entropy_shard_sum_exp<T>>(kThisTarget,
                                                              &cross_entropy_shard_sum_exp<T>);
    register_kernel<&kernels::cross_entropy_shard_gradient<T>>(kThisTarget,
                                                               &cross_entropy_shard_gradient<T>);
  });
}

TESSERA_TARGET_END
