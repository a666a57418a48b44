// GELU and SwiGLU (contract in activations.h), compiled once per CPU target.
#include "tessera/kernels/activations.h"

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/fast_exp.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

constexpr int64_t kParallelThreshold = 1 << 14;

// Logistic sigmoid of z without overflow or cancellation: with t = exp(-|z|) in (0, 1],
// sigmoid(z) = 1/(1+t) for z >= 0 and t/(1+t) otherwise, and sigmoid(z)(1 - sigmoid(z)) =
// t/(1+t)^2 for either sign (returned in *slope).
inline VecF sigmoid(VecF z, VecF* slope) {
  const VecF t = fast_exp(zero() - abs(z));
  const VecF r = splat(1.0f) / (splat(1.0f) + t);
  const VecF tr = t * r;
  *slope = tr * r;
  return select(cmp_ge(z, zero()), r, tr);
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// gelu(x) = 0.5 x (1 + tanh(u)) = x s, s = sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3): the
// sigmoid form has no 1 + tanh cancellation for negative x. Returns gelu; *grad = d gelu / dx =
// s + x * 2 s(1-s) * du/dx. Beyond |x| = 1e4, gelu is exactly x or 0 in fp32 with slope 1 or 0;
// clamping x inside u keeps x^2 finite, so the slope term is 0 * finite, not 0 * inf = NaN.
inline VecF gelu16(VecF x, VecF* grad) {
  const VecF xc = max(splat(-1e4f), min(splat(1e4f), x));  // NaN kept
  const VecF x2 = xc * xc;
  const VecF k0 = splat(kGeluScale);
  const VecF two_u = (splat(2.0f * kGeluScale) * xc) * fmadd(splat(kGeluCubic), x2, splat(1.0f));
  VecF slope;
  const VecF s = sigmoid(two_u, &slope);
  if (grad) {
    const VecF du = k0 * fmadd(splat(3.0f * kGeluCubic), x2, splat(1.0f));
    *grad = fmadd(x * (slope + slope), du, s);
  }
  return x * s;
}

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  TESSERA_CHECK(n >= 0);
  const auto block = [out, inp](int64_t i, int lanes) {
    store(out + i, gelu16(load(inp + i, lanes), nullptr), lanes);
  };
  const int64_t full = n / kLanes * kLanes;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < full; i += kLanes) block(i, kLanes);
  if (full < n) block(full, static_cast<int>(n - full));
}

template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, int64_t n) {
  TESSERA_CHECK(n >= 0);
  const auto block = [dinp, dout, inp](int64_t i, int lanes) {
    VecF grad;
    gelu16(load(inp + i, lanes), &grad);
    store(dinp + i, load(dout + i, lanes) * grad, lanes);  // dout read before write
  };
  const int64_t full = n / kLanes * kLanes;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < full; i += kLanes) block(i, kLanes);
  if (full < n) block(full, static_cast<int>(n - full));
}

template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F) {
  TESSERA_CHECK(N >= 0 && F > 0);
#pragma omp parallel for schedule(static) if (N * F > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    const T* gate = inp + n * 2 * F;
    const T* up = gate + F;
    T* o = out + n * F;
    for_each_block(0, F, [=](int64_t f, int lanes) {
      const VecF g = load(gate + f, lanes);
      VecF slope;
      const VecF silu = g * sigmoid(g, &slope);
      store(o + f, silu * load(up + f, lanes), lanes);
    });
  }
}

template <typename T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, int64_t N, int64_t F) {
  TESSERA_CHECK(N >= 0 && F > 0);
#pragma omp parallel for schedule(static) if (N * F > kParallelThreshold)
  for (int64_t n = 0; n < N; ++n) {
    const T* gate = inp + n * 2 * F;
    const T* up = gate + F;
    const T* dy = dout + n * F;
    T* dgate = dinp + n * 2 * F;
    T* dup = dgate + F;
    for_each_block(0, F, [=](int64_t f, int lanes) {
      const VecF g = load(gate + f, lanes);
      const VecF u = load(up + f, lanes);
      const VecF d = load(dy + f, lanes);
      VecF slope;
      const VecF sig = sigmoid(g, &slope);
      // d silu / dg = sigmoid + g * sigmoid (1 - sigmoid)
      const VecF dsilu = fmadd(g, slope, sig);
      store(dgate + f, (d * u) * dsilu, lanes);
      store(dup + f, d * (g * sig), lanes);
    });
  }
}

void register_activations() {
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::gelu_forward<T>>(kThisTarget, &gelu_forward<T>);
    register_kernel<&kernels::gelu_backward<T>>(kThisTarget, &gelu_backward<T>);
    register_kernel<&kernels::swiglu_forward<T>>(kThisTarget, &swiglu_forward<T>);
    register_kernel<&kernels::swiglu_backward<T>>(kThisTarget, &swiglu_backward<T>);
  });
}

TESSERA_TARGET_END
