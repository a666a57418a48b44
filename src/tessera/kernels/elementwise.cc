// Elementwise kernels (contract in elementwise.h), compiled once per CPU target.
#include "tessera/kernels/elementwise.h"

#include "tessera/kernels/fast_exp.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

constexpr int64_t kParallelThreshold = 1 << 15;

}  // namespace

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i += kLanes) {
    const int lanes = lanes_left(i, n);
    store(out + i, load(a + i, lanes) + load(b + i, lanes), lanes);
  }
}

// out (n) = in, each element loaded as fp32 and stored as To (rounded to nearest even).
template <typename To, typename From>
void convert_elements(To* out, const From* in, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; i += kLanes) {
    const int lanes = lanes_left(i, n);
    store(out + i, load(in + i, lanes), lanes);
  }
}

template <typename T>
void round_from_f32(T* out, const float* in, int64_t n) {
  convert_elements(out, in, n);
}

template <typename T>
void widen_to_f32(float* out, const T* in, int64_t n) {
  convert_elements(out, in, n);
}

void exp_f32(float* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes) {
    const int lanes = lanes_left(i, n);
    store(out + i, fast_exp(load(in + i, lanes)), lanes);
  }
}

void register_elementwise() {
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::add<T>>(kThisTarget, &add<T>);
    register_kernel<&kernels::round_from_f32<T>>(kThisTarget, &round_from_f32<T>);
    register_kernel<&kernels::widen_to_f32<T>>(kThisTarget, &widen_to_f32<T>);
  });
  register_kernel<&kernels::widen_to_f32<fp8_e4m3>>(kThisTarget, &widen_to_f32<fp8_e4m3>);
  register_kernel<&kernels::widen_to_f32<fp8_e5m2>>(kThisTarget, &widen_to_f32<fp8_e5m2>);
  register_kernel<&kernels::exp_f32>(kThisTarget, &exp_f32);
}

TESSERA_TARGET_END
