#include "tessera/kernels/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "tessera/kernels/gemm.h"
#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

using testing::dot;
using testing::finite_difference;
using testing::max_scaled_error;
using testing::random_normal;
using testing::round_to_bf16;
using testing::to_bf16;
using testing::to_float;

// Sizes that are not multiples of 16, so every vector loop has a tail.
constexpr int64_t kN = 7, kC = 19, kOC = 37;

// out[n,o] = sum_c inp[n,c] * weight[o,c] + bias[o], in double.
std::vector<double> reference_forward(const std::vector<float>& inp,
                                      const std::vector<float>& weight, const float* bias,
                                      int64_t N, int64_t C, int64_t OC) {
  std::vector<double> out(N * OC);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double s = bias ? bias[o] : 0.0;
      for (int64_t c = 0; c < C; ++c) s += double(inp[n * C + c]) * weight[o * C + c];
      out[n * OC + o] = s;
    }
  return out;
}

TEST(LinearForward, Fp32MatchesDoubleReference) {
  const auto inp = random_normal(kN * kC, 1), weight = random_normal(kOC * kC, 2, 0.3f);
  const auto bias = random_normal(kOC, 3);
  for (const float* b : {bias.data(), static_cast<const float*>(nullptr)}) {
    std::vector<float> out(kN * kOC);
    linear_forward(out.data(), inp.data(), weight.data(), b, kN, kC, kOC);
    // fp32 accumulation over C = 19 terms: ~1e-7 relative; 1e-5 is a wide margin.
    EXPECT_LT(max_scaled_error(out, reference_forward(inp, weight, b, kN, kC, kOC)), 1e-5)
        << (b ? "with bias" : "no bias");
  }
}

TEST(LinearForward, Bf16MatchesDoubleReference) {
  const int64_t N = 33, C = 50, OC = 70;
  const auto inp = round_to_bf16(random_normal(N * C, 4));
  const auto weight = round_to_bf16(random_normal(OC * C, 5, 0.2f));
  const auto bias = round_to_bf16(random_normal(OC, 6));
  std::vector<bf16> out(N * OC);
  const auto bias16 = to_bf16(bias);
  linear_forward(out.data(), to_bf16(inp).data(), to_bf16(weight).data(), bias16.data(), N, C, OC);
  // Inputs are exact bf16 values; the error is the bf16 rounding of the product and then of the
  // sum with the bias: two roundings of 2^-8 relative at most, so 1e-2 of the output scale.
  EXPECT_LT(max_scaled_error(to_float(out), reference_forward(inp, weight, bias.data(), N, C, OC)),
            1e-2);
}

// The bias pass in place on 16-bit rows is core/dtype.h's rounding of the fp32 sum, bit for bit,
// on every target: rows of 37 (a tail), ties that round to even both ways, a NaN and infinities
// passed through, and a sum that overflows to infinity.
template <typename T>
void expect_bias_pass_rounds_as_scalar() {
  const int64_t N = 5, OC = kOC;
  std::vector<float> values = random_normal(N * OC, 21, 3.0f), bias = random_normal(OC, 22);
  values[3] = std::numeric_limits<float>::quiet_NaN();
  values[OC + 1] = std::numeric_limits<float>::infinity();
  values[2 * OC + 36] = -std::numeric_limits<float>::infinity();
  values[3 * OC + 5] = std::numeric_limits<float>::max();
  bias[5] = std::numeric_limits<float>::max();
  std::vector<T> out(N * OC), bias16(OC);
  for (int64_t i = 0; i < N * OC; ++i) out[i] = from_f32<T>(values[i]);
  for (int64_t o = 0; o < OC; ++o) bias16[o] = from_f32<T>(bias[o]);
  // Ties: 1 + half an ulp of T (to even: down) and 1 + 3 halves (up), as a value plus a bias.
  const float ulp = std::is_same_v<T, bf16> ? 0x1p-7f : 0x1p-10f;
  out[4 * OC + 7] = from_f32<T>(1.0f), bias16[7] = from_f32<T>(ulp / 2);
  out[4 * OC + 8] = from_f32<T>(1.0f + ulp), bias16[8] = from_f32<T>(ulp / 2);
  std::vector<T> expected(N * OC);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o)
      expected[n * OC + o] = from_f32<T>(to_f32(out[n * OC + o]) + to_f32(bias16[o]));
  ASSERT_EQ(to_f32(expected[4 * OC + 7]), 1.0f);
  ASSERT_EQ(to_f32(expected[4 * OC + 8]), 1.0f + 2 * ulp);
  bias_forward(out.data(), bias16.data(), N, OC);
  for (int64_t i = 0; i < N * OC; ++i)
    ASSERT_EQ(out[i].bits, expected[i].bits) << "element " << i << " of " << N << " x " << OC;
}

TEST(BiasForward, Bf16RoundsAsScalar) { expect_bias_pass_rounds_as_scalar<bf16>(); }
TEST(BiasForward, Fp16RoundsAsScalar) { expect_bias_pass_rounds_as_scalar<fp16>(); }

TEST(LinearBackward, Fp32MatchesFiniteDifferences) {
  auto inp = random_normal(kN * kC, 7), weight = random_normal(kOC * kC, 8, 0.3f);
  auto bias = random_normal(kOC, 9);
  const auto probe = random_normal(kN * kOC, 10);  // loss = <out, probe>, so dout = probe
  const auto loss = [&] {
    std::vector<float> out(kN * kOC);
    linear_forward(out.data(), inp.data(), weight.data(), bias.data(), kN, kC, kOC);
    return dot(out, probe);
  };
  // The loss is linear in each single input, so central differences are exact up to rounding
  // for any step: a large h makes the fp32 rounding of the forward pass negligible.
  const double h = 0.5;
  const auto fd_inp = finite_difference(inp, loss, h);
  const auto fd_weight = finite_difference(weight, loss, h);
  const auto fd_bias = finite_difference(bias, loss, h);

  // dinp is overwritten (NaN must vanish); dweight and dbias accumulate onto what is there.
  std::vector<float> dinp(kN * kC, std::numeric_limits<float>::quiet_NaN());
  const auto dweight0 = random_normal(kOC * kC, 11), dbias0 = random_normal(kOC, 12);
  std::vector<float> dweight = dweight0, dbias = dbias0;
  linear_backward(dinp.data(), dweight.data(), dbias.data(), probe.data(), inp.data(),
                  weight.data(), kN, kC, kOC);
  for (size_t i = 0; i < dweight.size(); ++i) dweight[i] -= dweight0[i];
  for (size_t i = 0; i < dbias.size(); ++i) dbias[i] -= dbias0[i];
  // Forward rounding (~1e-7 relative per output) summed over N*OC probe terms, divided by 2h.
  EXPECT_LT(max_scaled_error(dinp, fd_inp), 1e-5);
  EXPECT_LT(max_scaled_error(dweight, fd_weight), 1e-5);
  EXPECT_LT(max_scaled_error(dbias, fd_bias), 1e-5);

  // Without dinp (first layer) and without bias, the weight gradient is the same.
  std::vector<float> dweight_only(kOC * kC, 0.0f);
  linear_backward<float>(nullptr, dweight_only.data(), nullptr, probe.data(), inp.data(),
                         weight.data(), kN, kC, kOC);
  EXPECT_LT(max_scaled_error(dweight_only, fd_weight), 1e-5);
}

TEST(LinearBackward, Bf16MatchesFp32OnSameInputs) {
  const int64_t N = 45, C = 50, OC = 70;
  const auto inp = round_to_bf16(random_normal(N * C, 13));
  const auto weight = round_to_bf16(random_normal(OC * C, 14, 0.2f));
  const auto dout = round_to_bf16(random_normal(N * OC, 15));
  // Prior gradients that bf16 cannot represent: if any step accumulated in bf16, they would be
  // rounded (2^-8 relative) and fail the fp32-level tolerance below.
  std::vector<float> dweight0(OC * C), dbias0(OC);
  for (size_t i = 0; i < dweight0.size(); ++i) dweight0[i] = 1.0f / 3.0f + 1e-3f * i;
  for (size_t i = 0; i < dbias0.size(); ++i) dbias0[i] = 1.0f / 7.0f + 1e-2f * i;

  std::vector<float> dinp32(N * C), dweight32 = dweight0, dbias32 = dbias0;
  linear_backward(dinp32.data(), dweight32.data(), dbias32.data(), dout.data(), inp.data(),
                  weight.data(), N, C, OC);

  const auto inp16 = to_bf16(inp), weight16 = to_bf16(weight), dout16 = to_bf16(dout);
  std::vector<bf16> dinp16(N * C);
  std::vector<float> dweight16 = dweight0, dbias16 = dbias0;
  linear_backward(dinp16.data(), dweight16.data(), dbias16.data(), dout16.data(), inp16.data(),
                  weight16.data(), N, C, OC);

  // dinp is a bf16 activation: one rounding of the fp32 accumulator, at most 2^-8 ~ 3.9e-3.
  EXPECT_LT(max_scaled_error(to_float(dinp16), dinp32), 5e-3);
  // bf16*bf16 products are exact in fp32 and both paths accumulate in fp32: only the summation
  // order differs (~N * 2^-24 relative).
  EXPECT_LT(max_scaled_error(dweight16, dweight32), 1e-5);
  EXPECT_LT(max_scaled_error(dbias16, dbias32), 1e-5);

  // And the forward: bf16 out vs fp32 out on the same inputs, two bf16 roundings (see above).
  std::vector<float> out32(N * OC);
  std::vector<bf16> out16(N * OC);
  const auto bias = round_to_bf16(random_normal(OC, 16));
  const auto bias16 = to_bf16(bias);
  linear_forward(out32.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  linear_forward(out16.data(), inp16.data(), weight16.data(), bias16.data(), N, C, OC);
  EXPECT_LT(max_scaled_error(to_float(out16), out32), 1e-2);
}

// Where bf16 gemms are widened to fp32, the bf16 layer computes the fp32 layer's values and rounds
// each output once: the forward adds the bias to the fp32 product before rounding, and the
// backward widens dout once and runs the same fp32 products. So, on inputs that are bf16 values,
// the bf16 outputs are the fp32 outputs rounded, and the fp32 gradients are the fp32 layer's, bit
// for bit.
TEST(Linear, Bf16OnWidenedPathIsTheFp32LayerRoundedOnce) {
  const Bf16GemmPath saved = bf16_gemm_path();
  set_bf16_gemm_path(Bf16GemmPath::kWidenToFp32);
  const int64_t N = 45, C = 50, OC = 70;
  const auto inp = round_to_bf16(random_normal(N * C, 17));
  const auto weight = round_to_bf16(random_normal(OC * C, 18, 0.2f));
  const auto bias = round_to_bf16(random_normal(OC, 19));
  const auto dout = round_to_bf16(random_normal(N * OC, 20));
  const auto inp16 = to_bf16(inp), weight16 = to_bf16(weight), bias16 = to_bf16(bias);
  const auto dout16 = to_bf16(dout);

  std::vector<float> out32(N * OC);
  std::vector<bf16> out16(N * OC);
  linear_forward(out32.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  linear_forward(out16.data(), inp16.data(), weight16.data(), bias16.data(), N, C, OC);
  EXPECT_EQ(to_float(out16), round_to_bf16(out32));

  std::vector<float> dinp32(N * C), dweight32(OC * C, 0.25f), dbias32(OC, 0.5f);
  std::vector<bf16> dinp16(N * C);
  std::vector<float> dweight16 = dweight32, dbias16 = dbias32;
  linear_backward(dinp32.data(), dweight32.data(), dbias32.data(), dout.data(), inp.data(),
                  weight.data(), N, C, OC);
  linear_backward(dinp16.data(), dweight16.data(), dbias16.data(), dout16.data(), inp16.data(),
                  weight16.data(), N, C, OC);
  EXPECT_EQ(to_float(dinp16), round_to_bf16(dinp32));
  EXPECT_EQ(dweight16, dweight32);
  EXPECT_EQ(dbias16, dbias32);
  set_bf16_gemm_path(saved);
}

}  // namespace
}  // namespace tessera::kernels
