// Helpers for numeric tests: deterministic random inputs, error metrics and central finite
// differences. Header-only; used by every kernel and model test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/philox.h"

namespace tessera::testing {

// n values, normal(0, scale), deterministic in (seed, stream).
inline std::vector<float> random_normal(int64_t n, uint64_t seed, float scale = 1.0f) {
  const PhiloxKey key = philox_key(seed, RngPurpose::kTest, 0);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * philox_normal(key, 0, i);
  return v;
}

// Rounds every value to the nearest bf16 (so bf16 and fp32 paths see identical inputs).
inline std::vector<float> round_to_bf16(std::vector<float> v) {
  for (float& x : v) x = to_f32(bf16(x));
  return v;
}
inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16(v[i]);
  return out;
}
inline std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_f32(v[i]);
  return out;
}

// max_i |a_i - b_i| / (max_j |b_j| + floor): an error relative to the reference's scale, which
// is robust for outputs that cross zero. A non-finite value in `a` is an infinite error (a plain
// comparison with NaN is false and would let a kernel that produced NaN pass).
template <typename A, typename B>
double max_scaled_error(const A& a, const B& b, double floor = 1e-12) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!std::isfinite(double(a[i]))) return std::numeric_limits<double>::infinity();
  double ref_scale = 0.0, err = 0.0;
  for (size_t i = 0; i < b.size(); ++i) ref_scale = std::max(ref_scale, std::fabs(double(b[i])));
  for (size_t i = 0; i < b.size(); ++i) err = std::max(err, std::fabs(double(a[i]) - double(b[i])));
  return err / (ref_scale + floor);
}

// Step and tolerance for checking an fp32 kernel's backward by central differences: truncation
// error O(h^2 f''') is ~1e-4 relative at h = 1e-2 for smooth functions of O(1) inputs, rounding
// error ~eps_f32 |loss| / h ~1e-5; a wrong or missing gradient term is an O(1) relative error.
// 1e-2 sits between the two with a wide margin on both sides.
constexpr double kFdStep = 1e-2;
constexpr double kFdTolerance = 1e-2;

// Central finite differences: d loss / d x_i for every i, loss = f() evaluated after writing
// x_i +- h into x (restored afterwards). The loss is computed in double by the caller.
inline std::vector<double> finite_difference(std::vector<float>& x,
                                             const std::function<double()>& loss, double h) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = static_cast<float>(saved + h);
    const double plus = loss();
    x[i] = static_cast<float>(saved - h);
    const double minus = loss();
    x[i] = saved;
    grad[i] = (plus - minus) / (2.0 * h);
  }
  return grad;
}

// The scaled error (max_scaled_error) between a kernel's gradient `dx` of loss = <out, probe>
// and central differences (step 1e-2) of the double reference `forward(x)` -> out, on every
// stride-th element of x (an odd stride still reaches every part of a packed tensor, e.g. q, k
// and v of every token). x is perturbed in place and restored.
template <typename Forward>
double strided_fd_error(std::vector<float>& x, const std::vector<float>& dx,
                        const std::vector<float>& probe, int64_t stride, Forward&& forward) {
  std::vector<float> picked, grad;
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); i += stride) {
    picked.push_back(x[i]);
    grad.push_back(dx[i]);
  }
  const std::vector<double> fd = finite_difference(
      picked,
      [&] {
        for (size_t j = 0; j < picked.size(); ++j) x[j * stride] = picked[j];
        const std::vector<double> out = forward(x);
        double loss = 0.0;
        for (size_t i = 0; i < out.size(); ++i) loss += out[i] * probe[i];
        return loss;
      },
      1e-2);
  for (size_t j = 0; j < picked.size(); ++j) x[j * stride] = picked[j];
  return max_scaled_error(grad, fd);
}

// Dot product in double: the usual way to turn a tensor output into a scalar loss for a
// gradient check (loss = <out, probe> gives dloss/dout = probe).
template <typename A>
double dot(const A& a, const std::vector<float>& probe) {
  double s = 0.0;
  for (size_t i = 0; i < probe.size(); ++i) s += double(to_f32(a[i])) * probe[i];
  return s;
}

}  // namespace tessera::testing
