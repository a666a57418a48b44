// fp16 storage path of every kernel: run on fp16-rounded inputs, compare with the fp32 kernel on
// the same (exactly representable) values. fp16 keeps 11 significant bits (unit roundoff
// 2^-11 ~ 4.9e-4); each output is rounded once or twice on top of fp32 arithmetic, so 4e-3 of the
// output scale leaves a margin of several roundings and still catches a wrong conversion.
#include <gtest/gtest.h>

#include <vector>

#include "tessera/kernels/activations.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/rope.h"
#include "tessera/kernels/adamw.h"
#include "tessera/kernels/cross_entropy.h"
#include "tessera/kernels/dropout.h"
#include "tessera/kernels/elementwise.h"
#include "tessera/kernels/embedding.h"
#include "tessera/kernels/gemm.h"
#include "tessera/kernels/linear.h"
#include "tessera/kernels/norms.h"
#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

constexpr double kFp16Tolerance = 4e-3;

std::vector<float> round_to_fp16(std::vector<float> v) {
  for (float& x : v) x = to_f32(fp16(x));
  return v;
}
std::vector<fp16> to_fp16(const std::vector<float>& v) {
  std::vector<fp16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = fp16(v[i]);
  return out;
}
std::vector<float> widen(const std::vector<fp16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_f32(v[i]);
  return out;
}

TEST(Fp16Kernels, NormsMatchFp32) {
  const int64_t N = 7, C = 37;
  auto x = round_to_fp16(testing::random_normal(N * C, 1));
  auto w = round_to_fp16(testing::random_normal(C, 2, 0.5f));
  auto b = round_to_fp16(testing::random_normal(C, 3, 0.5f));
  auto dy = round_to_fp16(testing::random_normal(N * C, 4));
  std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C), dw(C, 0), db(C, 0);
  std::vector<fp16> out16(N * C), dx16(N * C);
  std::vector<float> mean16(N), rstd16(N), dw16(C, 0), db16(C, 0);
  const auto x16 = to_fp16(x), w16 = to_fp16(w), b16 = to_fp16(b), dy16 = to_fp16(dy);
  layer_norm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  layer_norm_forward(out16.data(), mean16.data(), rstd16.data(), x16.data(), w16.data(), b16.data(), N, C, 1e-5f);
  EXPECT_LT(testing::max_scaled_error(widen(out16), out), kFp16Tolerance);
  layer_norm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  layer_norm_backward(dx16.data(), dw16.data(), db16.data(), dy16.data(), x16.data(), w16.data(), mean16.data(), rstd16.data(), N, C);
  EXPECT_LT(testing::max_scaled_error(widen(dx16), dx), kFp16Tolerance);
  EXPECT_LT(testing::max_scaled_error(dw16, dw), kFp16Tolerance);
  EXPECT_LT(testing::max_scaled_error(db16, db), kFp16Tolerance);
  rms_norm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  rms_norm_forward(out16.data(), rstd16.data(), x16.data(), w16.data(), N, C, 1e-5f);
  EXPECT_LT(testing::max_scaled_error(widen(out16), out), kFp16Tolerance);
}

TEST(Fp16Kernels, ActivationsMatchFp32) {
  const int64_t N = 5, F = 19;
  auto h = round_to_fp16(testing::random_normal(N * 2 * F, 5, 2.0f));
  auto dy = round_to_fp16(testing::random_normal(N * F, 6));
  const auto h16 = to_fp16(h), dy16 = to_fp16(dy);
  std::vector<float> out(N * F), dh(N * 2 * F);
  std::vector<fp16> out16(N * F), dh16(N * 2 * F);
  swiglu_forward(out.data(), h.data(), N, F);
  swiglu_forward(out16.data(), h16.data(), N, F);
  EXPECT_LT(testing::max_scaled_error(widen(out16), out), kFp16Tolerance);
  swiglu_backward(dh.data(), dy.data(), h.data(), N, F);
  swiglu_backward(dh16.data(), dy16.data(), h16.data(), N, F);
  EXPECT_LT(testing::max_scaled_error(widen(dh16), dh), kFp16Tolerance);
  gelu_forward(out.data(), h.data(), N * F);
  gelu_forward(out16.data(), h16.data(), N * F);
  EXPECT_LT(testing::max_scaled_error(widen(out16), out), kFp16Tolerance);
  gelu_backward(out.data(), dy.data(), h.data(), N * F);
  gelu_backward(out16.data(), dy16.data(), h16.data(), N * F);
  EXPECT_LT(testing::max_scaled_error(widen(out16), out), kFp16Tolerance);
}

TEST(Fp16Kernels, EmbeddingDropoutAddMatchFp32) {
  const int64_t V = 11, C = 21, N = 6;
  auto wte = round_to_fp16(testing::random_normal(V * C, 7));
  const std::vector<int32_t> tokens = {3, 0, 10, 3, 7, 1};
  std::vector<float> out(N * C);
  std::vector<fp16> out16(N * C);
  const auto wte16 = to_fp16(wte);
  embedding_forward(out.data(), tokens.data(), nullptr, wte.data(), static_cast<const float*>(nullptr), N, C, 0, V);
  embedding_forward(out16.data(), tokens.data(), nullptr, wte16.data(), static_cast<const fp16*>(nullptr), N, C, 0, V);
  EXPECT_EQ(widen(out16), out);  // a lookup is exact
  const PhiloxKey key = philox_key(9, RngPurpose::kTest, 1);
  const TokenCoords coords{0, 0, 3, 3, {}};
  std::vector<float> dropped(N * C);
  std::vector<fp16> dropped16(N * C);
  dropout_forward(dropped.data(), out.data(), key, coords, N, C, 0.25f);
  dropout_forward(dropped16.data(), out16.data(), key, coords, N, C, 0.25f);
  EXPECT_LT(testing::max_scaled_error(widen(dropped16), dropped), kFp16Tolerance);
  for (size_t i = 0; i < dropped.size(); ++i) EXPECT_EQ(dropped[i] == 0.0f, to_f32(dropped16[i]) == 0.0f);
  add(out16.data(), out16.data(), dropped16.data(), N * C);
  add(out.data(), out.data(), dropped.data(), N * C);
  EXPECT_LT(testing::max_scaled_error(widen(out16), out), kFp16Tolerance);
}

TEST(Fp16Kernels, CrossEntropyAndAdamWMatchFp32) {
  const int64_t N = 4, V = 40, V_real = 37;
  auto logits = round_to_fp16(testing::random_normal(N * V, 10, 3.0f));
  const std::vector<int32_t> targets = {1, 36, 0, 20};
  std::vector<float> loss(N), loss16(N), grad(N * V);
  std::vector<fp16> grad16(N * V);
  const auto logits16 = to_fp16(logits);
  cross_entropy_forward_backward(loss.data(), grad.data(), logits.data(), targets.data(), nullptr, N, V, V_real, 0.25f);
  cross_entropy_forward_backward(loss16.data(), grad16.data(), logits16.data(), targets.data(), nullptr, N, V, V_real, 0.25f);
  EXPECT_LT(testing::max_scaled_error(loss16, loss), 1e-6);  // same fp16-exact inputs, fp32 math
  EXPECT_LT(testing::max_scaled_error(widen(grad16), grad), kFp16Tolerance);

  const int64_t n = 33;
  auto master = testing::random_normal(n, 11), master16 = master;
  auto g = testing::random_normal(n, 12);
  std::vector<float> m(n, 0), v(n, 0), m16(n, 0), v16(n, 0), out(n);
  std::vector<fp16> out16(n);
  adamw_step(master.data(), m.data(), v.data(), out.data(), g.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f);
  adamw_step(master16.data(), m16.data(), v16.data(), out16.data(), g.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f);
  EXPECT_EQ(master16, master);  // the fp32 master update does not depend on the copy's dtype
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out16[i].bits, fp16(master[i]).bits);
}

TEST(Fp16Kernels, GemmAllTransposesMatchFp32OnTheSameValues) {
  const int64_t M = 13, N = 17, K = 29, pad = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t a_rows = ta ? K : M, a_cols = (ta ? M : K) + pad;
      const int64_t b_rows = tb ? N : K, b_cols = (tb ? K : N) + pad;
      auto a = round_to_fp16(testing::random_normal(a_rows * a_cols, 20));
      auto b = round_to_fp16(testing::random_normal(b_rows * b_cols, 21));
      const auto a16 = to_fp16(a), b16 = to_fp16(b);
      std::vector<float> c(M * N, 0.5f), c32(M * N, 0.5f);
      gemm(ta, tb, M, N, K, 1.0f, a16.data(), a_cols, b16.data(), b_cols, 1.0f, c.data(), N);
      gemm(ta, tb, M, N, K, 1.0f, a.data(), a_cols, b.data(), b_cols, 1.0f, c32.data(), N);
      // Identical fp32 operands through the same fp32 path: equal up to summation order.
      EXPECT_LT(testing::max_scaled_error(c, c32), 1e-6) << ta << tb;
      std::vector<fp16> c16(M * N);
      gemm(ta, tb, M, N, K, 1.0f, a16.data(), a_cols, b16.data(), b_cols, 0.0f, c16.data(), N);
      gemm(ta, tb, M, N, K, 1.0f, a.data(), a_cols, b.data(), b_cols, 0.0f, c32.data(), N);
      EXPECT_LT(testing::max_scaled_error(widen(c16), c32), kFp16Tolerance) << ta << tb;
    }
  }
}

TEST(Fp16Kernels, LinearMatchesFp32) {
  const int64_t N = 9, C = 20, OC = 11;
  auto x = round_to_fp16(testing::random_normal(N * C, 30));
  auto w = round_to_fp16(testing::random_normal(OC * C, 31, 0.3f));
  auto b = round_to_fp16(testing::random_normal(OC, 32));
  auto dy = round_to_fp16(testing::random_normal(N * OC, 33));
  const auto x16 = to_fp16(x), w16 = to_fp16(w), b16 = to_fp16(b), dy16 = to_fp16(dy);
  std::vector<float> y(N * OC), dx(N * C), dw(OC * C, 0), db(OC, 0), dw16(OC * C, 0), db16(OC, 0);
  std::vector<fp16> y16(N * OC), dx16(N * C);
  linear_forward(y.data(), x.data(), w.data(), b.data(), N, C, OC);
  linear_forward(y16.data(), x16.data(), w16.data(), b16.data(), N, C, OC);
  EXPECT_LT(testing::max_scaled_error(widen(y16), y), kFp16Tolerance);
  linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC);
  linear_backward(dx16.data(), dw16.data(), db16.data(), dy16.data(), x16.data(), w16.data(), N, C, OC);
  EXPECT_LT(testing::max_scaled_error(widen(dx16), dx), kFp16Tolerance);
  EXPECT_LT(testing::max_scaled_error(dw16, dw), 1e-6);  // fp32 accumulation of equal values
  EXPECT_LT(testing::max_scaled_error(db16, db), 1e-6);
}

TEST(Fp16Kernels, RopeAndAttentionMatchFp32) {
  const int64_t B = 2, T = 37;
  const int NH = 4, KV = 2, HD = 16, W = (NH + 2 * KV) * HD;
  auto qkv = round_to_fp16(testing::random_normal(B * T * W, 40));
  auto dout = round_to_fp16(testing::random_normal(B * T * NH * HD, 41));
  auto qkv16 = to_fp16(qkv);
  const auto dout16 = to_fp16(dout);
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(t + 5);
  rope_forward(qkv.data(), pos.data(), B, T, NH, KV, HD, 10000.0f);
  rope_forward(qkv16.data(), pos.data(), B, T, NH, KV, HD, 10000.0f);
  EXPECT_LT(testing::max_scaled_error(widen(qkv16), qkv), kFp16Tolerance);
  qkv = widen(qkv16);  // continue from identical values
  AttentionDropout none;
  std::vector<float> out(B * T * NH * HD), lse(B * NH * T), lse16(B * NH * T), dqkv(B * T * W);
  std::vector<fp16> out16(out.size()), dqkv16(dqkv.size());
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH, KV, HD, none);
  attention_forward(out16.data(), lse16.data(), qkv16.data(), B, T, NH, KV, HD, none);
  EXPECT_LT(testing::max_scaled_error(widen(out16), out), kFp16Tolerance);
  EXPECT_LT(testing::max_scaled_error(lse16, lse), 1e-6);  // fp32 math on equal inputs
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, NH, KV, HD, none);
  attention_backward(dqkv16.data(), dout16.data(), qkv16.data(), out16.data(), lse16.data(), B, T, NH, KV, HD, none);
  // The fp16 backward reads the fp16-rounded forward output (D = rowsum(dout * out)): one more
  // rounding feeds every gradient, so twice the pointwise tolerance.
  EXPECT_LT(testing::max_scaled_error(widen(dqkv16), dqkv), 2 * kFp16Tolerance);
}

}  // namespace
}  // namespace tessera::kernels
