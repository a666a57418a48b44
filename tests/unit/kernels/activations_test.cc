#include "tessera/kernels/activations.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

using testing::dot;
using testing::finite_difference;
using testing::random_normal;
using testing::round_to_bf16;
using testing::to_bf16;
using testing::to_float;

using testing::max_scaled_error;

using testing::kFdStep;
using testing::kFdTolerance;

// bf16 kernel on rounded inputs against the fp32 kernel on the exact inputs: bf16 keeps 8
// significant bits, so inputs and outputs each carry up to 2^-8 (~4e-3) relative rounding
// error, passed through slopes of O(1) (|d gelu/dx| <= 1.13); measured 2.3e-3 .. 3.8e-3 of the
// output scale. 2e-2 keeps a ~5x margin and still catches a wrong conversion (an O(1) error).
constexpr double kBf16Tolerance = 2e-2;

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3). Written as x / (1 + e^-2u),
// the same function, because 1 + tanh(u) cancels in double too for x << 0.
double gelu_ref(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-2.0 * u));
}
double gelu_grad_ref(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  const double du = std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}
double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }
double silu_grad_ref(double g) {
  const double s = 1.0 / (1.0 + std::exp(-g));
  return s + g * s * (1.0 - s);
}

// Normal(0, 3) values plus edge cases: signed zeros, tiny, moderate and huge magnitudes
// (exp underflow/saturation), placed at the front so they also land in full vector blocks.
std::vector<float> gelu_inputs(int64_t n, uint64_t seed) {
  std::vector<float> x = random_normal(n, seed, 3.0f);
  const float special[] = {0.0f,  -0.0f,  1e-20f, -1e-20f, 0.5f, -0.75f, 5.0f,  -5.0f,
                           10.0f, -10.0f, 30.0f,  -30.0f,  1e4f, -1e4f,  3e38f, -3e38f};
  for (size_t i = 0; i < std::size(special) && i < x.size(); ++i) x[i] = special[i];
  return x;
}

TEST(GeluForward, MatchesDoubleReference) {
  for (int64_t n : {1, 15, 16, 17, 1007}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const auto x = gelu_inputs(n, 1);
    std::vector<float> out(n);
    gelu_forward(out.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = gelu_ref(x[i]);
      // A few ulp from exp, the division and the products (16 ulp allowed). For x < 0, gelu =
      // x e^{-2|u|} / (1 + e^{-2|u|}) also inherits the fp32 error of the exponent 2u (~|2u|
      // ulp), which exp turns into ~|2u| ulp of relative error (its condition number). Results
      // below ~1e-36 come from exp's subnormal range and only need to be ~0.
      const double two_u =
          x[i] < 0 ? -2.0 * std::sqrt(2.0 / M_PI) * x[i] * (1.0 + 0.044715 * double(x[i]) * x[i])
                   : 0.0;
      const double rel = (16.0 + 4.0 * two_u) * std::ldexp(1.0, -24);
      EXPECT_NEAR(out[i], ref, rel * std::fabs(ref) + 1e-36) << "x=" << x[i];
    }
  }
}

TEST(GeluBackward, MatchesAnalyticDerivative) {
  const int64_t n = 1007;
  const auto x = gelu_inputs(n, 2);
  std::vector<float> ones(n, 1.0f), grad(n);
  gelu_backward(grad.data(), ones.data(), x.data(), n);
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = gelu_grad_ref(x[i]);
  // The derivative crosses zero near x = -0.75, so compare against the scale of the reference.
  EXPECT_LT(max_scaled_error(grad, ref), 1e-5);
}

TEST(GeluBackward, MatchesFiniteDifferences) {
  const int64_t n = 67;
  auto x = random_normal(n, 3, 2.0f);
  const auto probe = random_normal(n, 4);
  std::vector<float> out(n), dinp(n);
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), n);
    return dot(out, probe);
  };
  gelu_backward(dinp.data(), probe.data(), x.data(), n);
  EXPECT_LT(max_scaled_error(dinp, finite_difference(x, loss, kFdStep)), kFdTolerance);
}

TEST(GeluBackward, OverwritesAndMayAliasDout) {
  const int64_t n = 100;
  const auto x = random_normal(n, 5), dout = random_normal(n, 6);
  std::vector<float> dinp(n, std::numeric_limits<float>::quiet_NaN());
  gelu_backward(dinp.data(), dout.data(), x.data(), n);
  std::vector<float> inplace = dout;
  gelu_backward(inplace.data(), inplace.data(), x.data(), n);
  EXPECT_EQ(inplace, dinp);
}

TEST(GeluBf16, MatchesFp32) {
  const int64_t n = 1007;
  const auto x = random_normal(n, 7, 3.0f), dout = random_normal(n, 8);
  const auto xr = round_to_bf16(x), doutr = round_to_bf16(dout);
  std::vector<float> out(n), dinp(n), out_r(n), dinp_r(n);
  gelu_forward(out.data(), x.data(), n);
  gelu_backward(dinp.data(), dout.data(), x.data(), n);
  gelu_forward(out_r.data(), xr.data(), n);
  gelu_backward(dinp_r.data(), doutr.data(), xr.data(), n);
  const auto xb = to_bf16(x), doutb = to_bf16(dout);
  std::vector<bf16> outb(n), dinpb(n);
  gelu_forward(outb.data(), xb.data(), n);
  gelu_backward(dinpb.data(), doutb.data(), xb.data(), n);
  EXPECT_LT(max_scaled_error(to_float(outb), out), kBf16Tolerance);
  EXPECT_LT(max_scaled_error(to_float(dinpb), dinp), kBf16Tolerance);
  // fp32 arithmetic whatever T: bf16 results are the fp32 results rounded to nearest even.
  EXPECT_EQ(to_float(outb), round_to_bf16(out_r));
  EXPECT_EQ(to_float(dinpb), round_to_bf16(dinp_r));
}

TEST(SwiGluForward, MatchesDoubleReference) {
  for (auto [N, F] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {4, 16}, {5, 37}, {2, 130}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " F=" << F);
    const auto inp = random_normal(N * 2 * F, 11, 3.0f);
    std::vector<float> out(N * F);
    swiglu_forward(out.data(), inp.data(), N, F);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t f = 0; f < F; ++f) {
        const double g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f];
        const double ref = silu_ref(g) * u;
        EXPECT_NEAR(out[n * F + f], ref, 2e-6 * std::fabs(ref) + 1e-36) << "g=" << g;
      }
    }
  }
}

TEST(SwiGluBackward, MatchesAnalyticDerivative) {
  const int64_t N = 5, F = 37;
  const auto inp = random_normal(N * 2 * F, 12, 3.0f), dout = random_normal(N * F, 13);
  std::vector<float> dinp(N * 2 * F);
  swiglu_backward(dinp.data(), dout.data(), inp.data(), N, F);
  std::vector<double> ref(N * 2 * F);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      const double g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f], d = dout[n * F + f];
      ref[n * 2 * F + f] = d * u * silu_grad_ref(g);
      ref[n * 2 * F + F + f] = d * silu_ref(g);
    }
  }
  EXPECT_LT(max_scaled_error(dinp, ref), 1e-5);
}

TEST(SwiGluBackward, MatchesFiniteDifferences) {
  const int64_t N = 3, F = 21;
  auto inp = random_normal(N * 2 * F, 14, 2.0f);
  const auto probe = random_normal(N * F, 15);
  std::vector<float> out(N * F), dinp(N * 2 * F, std::numeric_limits<float>::quiet_NaN());
  auto loss = [&] {
    swiglu_forward(out.data(), inp.data(), N, F);
    return dot(out, probe);
  };
  swiglu_backward(dinp.data(), probe.data(), inp.data(), N, F);
  EXPECT_LT(max_scaled_error(dinp, finite_difference(inp, loss, kFdStep)), kFdTolerance);
}

TEST(SwiGluBf16, MatchesFp32) {
  const int64_t N = 4, F = 83;
  const auto inp = random_normal(N * 2 * F, 16, 2.0f), dout = random_normal(N * F, 17);
  const auto inpr = round_to_bf16(inp), doutr = round_to_bf16(dout);
  std::vector<float> out(N * F), dinp(N * 2 * F), out_r(N * F), dinp_r(N * 2 * F);
  swiglu_forward(out.data(), inp.data(), N, F);
  swiglu_backward(dinp.data(), dout.data(), inp.data(), N, F);
  swiglu_forward(out_r.data(), inpr.data(), N, F);
  swiglu_backward(dinp_r.data(), doutr.data(), inpr.data(), N, F);
  const auto inpb = to_bf16(inp), doutb = to_bf16(dout);
  std::vector<bf16> outb(N * F), dinpb(N * 2 * F);
  swiglu_forward(outb.data(), inpb.data(), N, F);
  swiglu_backward(dinpb.data(), doutb.data(), inpb.data(), N, F);
  EXPECT_LT(max_scaled_error(to_float(outb), out), kBf16Tolerance);
  EXPECT_LT(max_scaled_error(to_float(dinpb), dinp), kBf16Tolerance);
  EXPECT_EQ(to_float(outb), round_to_bf16(out_r));
  EXPECT_EQ(to_float(dinpb), round_to_bf16(dinp_r));
}

// A tensor-parallel rank holds a slice of F ([gate_k | up_k] per row); its outputs must be the
// corresponding columns of the unsharded result, bit for bit.
TEST(SwiGluForward, ShardOfFGivesSameBits) {
  const int64_t N = 3, F = 40, F0 = 13, Fs = F - F0;  // shard [13, 40): unaligned start, size
  const auto inp = random_normal(N * 2 * F, 18, 2.0f);
  std::vector<float> out(N * F);
  swiglu_forward(out.data(), inp.data(), N, F);
  std::vector<float> shard(N * 2 * Fs), out_shard(N * Fs);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < Fs; ++f) {
      shard[n * 2 * Fs + f] = inp[n * 2 * F + F0 + f];
      shard[n * 2 * Fs + Fs + f] = inp[n * 2 * F + F + F0 + f];
    }
  }
  swiglu_forward(out_shard.data(), shard.data(), N, Fs);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < Fs; ++f) EXPECT_EQ(out_shard[n * Fs + f], out[n * F + F0 + f]);
}

}  // namespace
}  // namespace tessera::kernels
