#include "tessera/kernels/gemv.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tessera/kernels/cpu_target.h"
#include "tessera/kernels/linear.h"
#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::random_normal;
using testing::round_to_bf16;

// out[m,o] = sum_c inp[m,c] * weight[o,c] + bias[o], in double.
std::vector<double> reference(const std::vector<float>& inp, const std::vector<float>& weight,
                              const float* bias, int64_t M, int64_t C, int64_t OC) {
  std::vector<double> out(M * OC);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t o = 0; o < OC; ++o) {
      double s = bias ? bias[o] : 0.0;
      for (int64_t c = 0; c < C; ++c) s += double(inp[m * C + c]) * weight[o * C + c];
      out[m * OC + o] = s;
    }
  return out;
}

template <typename T>
std::vector<T> stored(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = from_f32<T>(v[i]);
  return out;
}

template <typename T>
std::vector<float> widened(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_f32(v[i]);
  return out;
}

// Every row count gemv takes (tiles of 1-4 rows, and a second block of rows past 4); C with a
// masked last block and without one, below one block, and long enough for a long fp32 sum; OC
// with a partial last group of columns, and large enough for the parallel loop (OC * C >= 2^16).
struct Shape {
  int64_t C, OC;
};
constexpr Shape kShapes[] = {{1, 1}, {5, 3}, {16, 8}, {19, 37}, {64, 6}, {257, 301}, {768, 90}};

// Weights and inputs as T (so fp32 and 16-bit runs see the values they can store), the output
// against the double reference at `tolerance` of its scale.
template <typename T>
void expect_matches_reference(double tolerance) {
  for (const Shape& s : kShapes)
    for (int64_t M = 1; M <= kGemvMaxRows; ++M)
      for (bool with_bias : {true, false}) {
        const auto inp = widened(stored<T>(random_normal(M * s.C, 1)));
        const auto weight = widened(stored<T>(random_normal(s.OC * s.C, 2, 0.3f)));
        const auto bias = widened(stored<T>(random_normal(s.OC, 3)));
        std::vector<T> out(M * s.OC);
        const auto bias_t = stored<T>(bias);
        gemv_forward(out.data(), stored<T>(inp).data(), stored<T>(weight).data(),
                     with_bias ? bias_t.data() : nullptr, M, s.C, s.OC);
        EXPECT_LT(
            max_scaled_error(widened(out), reference(inp, weight, with_bias ? bias.data() : nullptr,
                                                     M, s.C, s.OC)),
            tolerance)
            << "M " << M << " C " << s.C << " OC " << s.OC << (with_bias ? " bias" : "");
      }
}

TEST(Gemv, Fp32MatchesDoubleReference) {
  // fp32 sums of up to 768 products of O(1) values: each partial sum rounds by 2^-24 relative,
  // ~1e-6 of the output scale in the worst case; 1e-5 is a wide margin, and a wrong or missing
  // term is an error of order 1e-2 or more.
  expect_matches_reference<float>(1e-5);
}

TEST(Gemv, Bf16MatchesDoubleReference) {
  // Inputs are exact bf16 values and the sum is fp32, so the error is the one rounding of the
  // output to bf16: 2^-9 relative at most. 4e-3 of the scale allows that and nothing more.
  expect_matches_reference<bf16>(4e-3);
}

TEST(Gemv, Fp16MatchesDoubleReference) {
  // As bf16, with fp16's 2^-11 rounding of the output.
  expect_matches_reference<fp16>(1e-3);
}

TEST(Gemv, EmptySumsGiveTheBias) {
  const std::vector<float> bias = {1.5f, -2.0f, 0.25f};
  std::vector<float> out(2 * 3, 7.0f);
  gemv_forward(out.data(), static_cast<const float*>(nullptr), static_cast<const float*>(nullptr),
               bias.data(), 2, 0, 3);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.0f, 0.25f, 1.5f, -2.0f, 0.25f}));
  gemv_forward(out.data(), static_cast<const float*>(nullptr), static_cast<const float*>(nullptr),
               static_cast<const float*>(nullptr), 2, 0, 3);
  EXPECT_EQ(out, std::vector<float>(6, 0.0f));
}

TEST(Gemv, AColumnShardGivesTheBitsOfTheWholeLayer) {
  // Tensor parallelism splits a column-parallel layer's weight rows: each output is its own dot
  // product, so any slice of the rows gives the same bits as the whole (gemv.h).
  const int64_t M = 3, C = 300, OC = 75;
  const auto inp = random_normal(M * C, 4), weight = random_normal(OC * C, 5, 0.1f);
  const auto bias = random_normal(OC, 6);
  std::vector<float> whole(M * OC);
  gemv_forward(whole.data(), inp.data(), weight.data(), bias.data(), M, C, OC);
  for (int64_t begin : {int64_t{0}, int64_t{13}, int64_t{38}}) {
    const int64_t cols = 37;
    std::vector<float> part(M * cols);
    gemv_forward(part.data(), inp.data(), weight.data() + begin * C, bias.data() + begin, M, C,
                 cols);
    for (int64_t m = 0; m < M; ++m)
      ASSERT_EQ(std::memcmp(&part[m * cols], &whole[m * OC + begin], cols * sizeof(float)), 0)
          << "columns from " << begin << ", row " << m;
  }
}

TEST(Gemv, LinearForwardTakesItForFewRowsInsideTheScope) {
  // Inside a ScopedGemvLinear linear_forward sends N <= kGemvMaxRows rows here: the same bits as
  // a direct call.
  const ScopedGemvLinear scope;
  const int64_t C = 129, OC = 65;
  const auto inp = round_to_bf16(random_normal(kGemvMaxRows * C, 7));
  const auto weight = round_to_bf16(random_normal(OC * C, 8, 0.2f));
  const auto bias = round_to_bf16(random_normal(OC, 9));
  const auto inp16 = stored<bf16>(inp), weight16 = stored<bf16>(weight);
  const auto bias16 = stored<bf16>(bias);
  for (int64_t N = 1; N <= kGemvMaxRows; ++N) {
    std::vector<bf16> a(N * OC), b(N * OC);
    linear_forward(a.data(), inp16.data(), weight16.data(), bias16.data(), N, C, OC);
    gemv_forward(b.data(), inp16.data(), weight16.data(), bias16.data(), N, C, OC);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)), 0) << "N " << N;
  }
}

TEST(Gemv, EveryTargetMatchesTheBaseline) {
  // The targets differ only in fused multiply-adds (baseline x86-64 has none) and so in the last
  // bits: a few fp32 ulp per step of a 257-term sum is well below 1e-5 of the output scale.
  const int64_t M = 5, C = 257, OC = 301;
  const auto inp = random_normal(M * C, 10), weight = random_normal(OC * C, 11, 0.3f);
  std::vector<float> base;
  for (CpuTarget t : compiled_cpu_targets()) {
    if (!cpu_supports(t)) continue;
    ScopedCpuTarget scope(t);
    std::vector<float> out(M * OC);
    gemv_forward(out.data(), inp.data(), weight.data(), static_cast<const float*>(nullptr), M, C,
                 OC);
    if (base.empty()) {
      base = out;
      continue;
    }
    EXPECT_LT(max_scaled_error(out, base), 1e-5) << cpu_target_name(t);
  }
}

}  // namespace
}  // namespace tessera::kernels
