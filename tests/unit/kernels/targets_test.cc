// Every kernel on every CPU target this machine can run, against the portable baseline target
// (the plain vector-extension build of the same source) in the same process. The rest of the
// kernel tests check each kernel against double-precision references and finite differences;
// ctest runs them once per target (tests/CMakeLists.txt). This file pins down how far targets
// may drift from each other:
//   - bitwise equal: data movement, conversions, dropout masks, embedding, RoPE, AdamW/SGD (no
//     multiply-add is fused there), sum_squares (exact squares, one fixed summation tree);
//   - <= 4e-6 of the output scale: kernels with fused multiply-adds or exp (baseline x86-64 has
//     no FMA, so each fused step may round differently: a few fp32 ulp, ~1e-7 each, over chains
//     of up to ~30 operations); the blocked GEMM is also bitwise equal between the FMA targets.
#include <gtest/gtest.h>

#include <cmath>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/kernels/activations.h"
#include "tessera/kernels/adamw.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/cpu_target.h"
#include "tessera/kernels/cross_entropy.h"
#include "tessera/kernels/dropout.h"
#include "tessera/kernels/elementwise.h"
#include "tessera/kernels/embedding.h"
#include "tessera/kernels/gemm_packed.h"
#include "tessera/kernels/norms.h"
#include "tessera/kernels/rope.h"
#include "testing/numeric.h"

namespace tessera::kernels {
namespace {

using testing::random_normal;

constexpr double kFusedTolerance = 4e-6;

// The outputs of `run` on every supported target, baseline first.
std::vector<std::pair<CpuTarget, std::vector<double>>> on_every_target(
    const std::function<std::vector<double>()>& run) {
  std::vector<std::pair<CpuTarget, std::vector<double>>> out;
  for (CpuTarget t : compiled_cpu_targets()) {
    if (!cpu_supports(t)) continue;
    ScopedCpuTarget scope(t);
    out.emplace_back(t, run());
  }
  return out;
}

template <typename V>
void append(std::vector<double>& out, const V& v) {
  for (const auto& x : v) out.push_back(static_cast<double>(to_f32(x)));
}

void expect_bitwise_across_targets(const std::function<std::vector<double>()>& run) {
  const auto results = on_every_target(run);
  ASSERT_FALSE(results.empty());
  for (const auto& [target, values] : results) {
    ASSERT_EQ(values.size(), results[0].second.size());
    for (size_t i = 0; i < values.size(); ++i) {
      // Compare bits, so -0.0 vs 0.0 or two different NaNs would count.
      ASSERT_EQ(std::memcmp(&values[i], &results[0].second[i], sizeof(double)), 0)
          << cpu_target_name(target) << " vs " << cpu_target_name(results[0].first)
          << " at " << i << ": " << values[i] << " vs " << results[0].second[i];
    }
  }
}

void expect_close_across_targets(const std::function<std::vector<double>()>& run,
                                 double tolerance) {
  const auto results = on_every_target(run);
  ASSERT_FALSE(results.empty());
  for (const auto& [target, values] : results)
    EXPECT_LE(testing::max_scaled_error(values, results[0].second), tolerance)
        << cpu_target_name(target) << " vs " << cpu_target_name(results[0].first);
}

TEST(KernelTargets, ActiveTargetIsTheBestSupportedUnlessCapped) {
  ASSERT_TRUE(cpu_supports(compiled_cpu_targets().front()));
  if (std::getenv("TESSERA_CPU_TARGET") == nullptr) {
    EXPECT_EQ(active_cpu_target(), best_cpu_target());
  }
  EXPECT_TRUE(cpu_supports(active_cpu_target()));
  for (CpuTarget t : compiled_cpu_targets()) {
    EXPECT_EQ(parse_cpu_target(cpu_target_name(t)), t);
    if (!cpu_supports(t)) {
      EXPECT_THROW(set_cpu_target(t), Error);
    }
  }
  EXPECT_FALSE(parse_cpu_target("avx-512").has_value());
}

TEST(KernelTargets, Fp16ConversionsMatchTheScalarOnesBitForBit) {
  // Every fp16 value widened, and fp32 values around every fp16 boundary, subnormals,
  // overflow, infinities and NaNs narrowed, on every target against core/dtype.h's fp16.
  std::vector<fp16> all(65536);
  for (int i = 0; i < 65536; ++i) all[i].bits = static_cast<uint16_t>(i);
  std::vector<float> narrow_in;
  for (int i = 0; i < 65536; i += 3) {
    const float f = fp16::to_float(static_cast<uint16_t>(i));
    narrow_in.push_back(f);
    narrow_in.push_back(std::nextafter(f, 0.0f));
    narrow_in.push_back(std::nextafter(f, 1e30f));
  }
  for (float f : {65504.0f, 65519.99f, 65520.0f, 1e9f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 1e-30f,
                  INFINITY, -INFINITY, NAN, -NAN})
    narrow_in.push_back(f);
  for (CpuTarget t : compiled_cpu_targets()) {
    if (!cpu_supports(t)) continue;
    ScopedCpuTarget scope(t);
    std::vector<float> widened(all.size());
    widen_to_f32(widened.data(), all.data(), static_cast<int64_t>(all.size()));
    for (int i = 0; i < 65536; ++i) {
      const float want = fp16::to_float(static_cast<uint16_t>(i));
      ASSERT_EQ(std::memcmp(&widened[i], &want, 4), 0) << cpu_target_name(t) << " half " << i;
    }
    std::vector<fp16> narrowed(narrow_in.size());
    round_from_f32(narrowed.data(), narrow_in.data(), static_cast<int64_t>(narrow_in.size()));
    for (size_t i = 0; i < narrow_in.size(); ++i)
      ASSERT_EQ(narrowed[i].bits, fp16::from_float(narrow_in[i]))
          << cpu_target_name(t) << " float " << narrow_in[i];
  }
}

// Every 8-bit float widened on every target (the vector layer's composed conversion,
// simd/vec_fp8.h) against core/fp8.h's scalar one, bit for bit (NaN as NaN), in whole blocks and
// in a tail; the codes sit past a 3-element offset so no block is aligned.
template <typename T>
void expect_fp8_widening_matches_scalar() {
  std::vector<T> all(3 + 256 + 5);
  for (int i = 0; i < 256 + 5; ++i) all[3 + i].bits = static_cast<uint8_t>(i * 37 % 256);
  for (CpuTarget t : compiled_cpu_targets()) {
    if (!cpu_supports(t)) continue;
    ScopedCpuTarget scope(t);
    std::vector<float> widened(all.size() - 3);
    widen_to_f32(widened.data(), all.data() + 3, static_cast<int64_t>(widened.size()));
    for (size_t i = 0; i < widened.size(); ++i) {
      const float want = T::to_float(all[3 + i].bits);
      if (std::isnan(want))
        ASSERT_TRUE(std::isnan(widened[i]))
            << cpu_target_name(t) << " code " << int(all[3 + i].bits);
      else
        ASSERT_EQ(std::memcmp(&widened[i], &want, 4), 0)
            << cpu_target_name(t) << " code " << int(all[3 + i].bits) << ": " << widened[i]
            << " for " << want;
    }
  }
}

TEST(KernelTargets, Fp8WideningMatchesTheScalarOneBitForBit) {
  expect_fp8_widening_matches_scalar<fp8_e4m3>();
  expect_fp8_widening_matches_scalar<fp8_e5m2>();
}

TEST(KernelTargets, Bf16RoundingMatchesTheScalarOne) {
  // Ties, carries into the exponent, overflow to inf, NaNs: bit for bit bf16::from_float. The
  // avx512bf16 target's vcvtneps2bf16 treats fp32 subnormal inputs as zero (Intel SDM); every
  // other target keeps them.
  // The finite ones also in a 16-lane block of their own: the AVX2 store rounds a block without
  // NaN by a shorter path than one with.
  const uint32_t finite[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f7f8000u,
                             0xff800000u, 0x00000001u, 0x807fffffu, 0x00008000u};
  std::vector<float> in = random_normal(4096, 7, 100.0f);
  for (uint32_t bits : finite) in.push_back(std::bit_cast<float>(bits));
  in.resize(4099 + 16, 1.0f);
  for (uint32_t bits : finite) in.push_back(std::bit_cast<float>(bits));
  for (uint32_t bits : {0x7fc00001u, 0x7f800001u, 0xffc00000u})
    in.push_back(std::bit_cast<float>(bits));
  // A NaN in the lower 8 lanes only of a block (each half of the AVX2 vector is tested).
  in.resize((in.size() + 15) / 16 * 16, 2.0f);
  in.push_back(std::bit_cast<float>(0x7f800001u));
  in.resize(in.size() + 15, 3.0f);
  for (CpuTarget t : compiled_cpu_targets()) {
    if (!cpu_supports(t)) continue;
    ScopedCpuTarget scope(t);
    std::vector<bf16> out(in.size());
    round_from_f32(out.data(), in.data(), static_cast<int64_t>(in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      const bool subnormal = std::fpclassify(in[i]) == FP_SUBNORMAL;
      const uint16_t want = subnormal && t == CpuTarget::kAvx512Bf16
                                ? static_cast<uint16_t>(std::signbit(in[i]) ? 0x8000 : 0)
                                : bf16::from_float(in[i]);
      ASSERT_EQ(out[i].bits, want) << cpu_target_name(t) << " bits "
                                   << std::bit_cast<uint32_t>(in[i]);
    }
  }
}

TEST(KernelTargets, ElementwiseEmbeddingRopeAndDropoutAreBitwiseEqual) {
  const int64_t N = 37, C = 77, V = 11;
  const auto a = random_normal(N * C, 1), b = random_normal(N * C, 2);
  const auto wte = random_normal(V * C, 3), wpe = random_normal(N * C, 4);
  std::vector<int32_t> tokens(N), positions(N);
  for (int64_t n = 0; n < N; ++n) tokens[n] = static_cast<int32_t>((n * 7) % V), positions[n] = static_cast<int32_t>(n);
  expect_bitwise_across_targets([&] {
    std::vector<double> out;
    std::vector<float> sum(N * C), emb(N * C), dwte(V * C, 0.0f), dwpe(N * C, 0.0f);
    add(sum.data(), a.data(), b.data(), N * C);
    append(out, sum);
    std::vector<bf16> sum16(N * C);
    round_from_f32(sum16.data(), sum.data(), N * C);
    append(out, sum16);
    embedding_forward(emb.data(), tokens.data(), positions.data(), wte.data(), wpe.data(), N, C, 0, V);
    append(out, emb);
    embedding_backward(dwte.data(), dwpe.data(), a.data(), tokens.data(), positions.data(), N, C, 0, V);
    append(out, dwte);
    append(out, dwpe);
    // RoPE over a (1, N, 2 + 2 * 1 heads of 16) qkv.
    std::vector<float> qkv(random_normal(N * 4 * 16, 5));
    rope_forward(qkv.data(), positions.data(), 1, N, 2, 1, 16, 10000.0f);
    append(out, qkv);
    rope_backward(qkv.data(), positions.data(), 1, N, 2, 1, 16, 10000.0f);
    append(out, qkv);
    std::vector<float> dropped(N * C), back(N * C);
    const PhiloxKey key = philox_key(9, RngPurpose::kHiddenDropout, 0);
    TokenCoords coords;
    coords.local_seq = N;
    coords.global_seq = N;
    dropout_forward(dropped.data(), a.data(), key, coords, N, C, 0.3f);
    dropout_backward(back.data(), b.data(), key, coords, N, C, 0.3f);
    append(out, dropped);
    append(out, back);
    return out;
  });
}

TEST(KernelTargets, OptimizerStepsAndNormsAreBitwiseEqual) {
  const int64_t n = 100003;
  const auto grad = random_normal(n, 11), init = random_normal(n, 12);
  expect_bitwise_across_targets([&] {
    std::vector<double> out;
    std::vector<float> master = init, m(n, 0.0f), v(n, 0.0f), mom(n, 0.0f);
    std::vector<bf16> p16(n);
    for (int step = 1; step <= 3; ++step)
      adamw_step(master.data(), m.data(), v.data(), p16.data(), grad.data(), n, 1e-3f, 0.9f, 0.95f,
                 1e-8f, 0.1f, step, 0.5f);
    append(out, master);
    append(out, m);
    append(out, v);
    append(out, p16);
    std::vector<float> sgd = init;
    for (int step = 1; step <= 2; ++step)
      sgd_step<float>(sgd.data(), mom.data(), nullptr, grad.data(), n, 1e-2f, 0.9f, 0.01f, step, 1.0f);
    append(out, sgd);
    out.push_back(sum_squares(grad.data(), n));
    out.push_back(has_non_finite(grad.data(), n) ? 1.0 : 0.0);
    return out;
  });
}

TEST(KernelTargets, NormsActivationsLossAndAttentionAgreeWithinFmaRounding) {
  const int64_t N = 33, C = 77, F = 45, V = 131, V_real = 120;
  const auto x = random_normal(N * C, 21), w = random_normal(C, 22), bias = random_normal(C, 23);
  const auto dy = random_normal(N * C, 24), gate_up = random_normal(N * 2 * F, 25);
  const auto logits = random_normal(N * V, 26, 3.0f);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 13) % V_real);
  const int64_t B = 2, T = 70;
  const int NH = 4, KV = 2, HD = 24;
  const auto qkv = random_normal(B * T * (NH + 2 * KV) * HD, 27);
  const auto dout = random_normal(B * T * NH * HD, 28);
  expect_close_across_targets([&] {
    std::vector<double> out;
    std::vector<float> y(N * C), mean(N), rstd(N), dx(N * C), dw(C, 0.0f), db(C, 0.0f);
    layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C, 1e-5f);
    layer_norm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    append(out, y), append(out, dx), append(out, dw), append(out, db);
    rms_norm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    rms_norm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    append(out, y), append(out, dx), append(out, dw);
    std::vector<float> g(N * C), dg(N * C), s(N * F), ds(N * 2 * F);
    gelu_forward(g.data(), x.data(), N * C);
    gelu_backward(dg.data(), dy.data(), x.data(), N * C);
    swiglu_forward(s.data(), gate_up.data(), N, F);
    swiglu_backward(ds.data(), s.data(), gate_up.data(), N, F);
    append(out, g), append(out, dg), append(out, s), append(out, ds);
    std::vector<float> losses(N), dlogits(N * V);
    cross_entropy_forward_backward(losses.data(), dlogits.data(), logits.data(), targets.data(),
                                   nullptr, N, V, V_real, 1.0f / N);
    append(out, losses), append(out, dlogits);
    std::vector<float> o(B * T * NH * HD), lse(B * NH * T), dqkv(qkv.size());
    AttentionDropout dropout;
    dropout.p = 0.1f;
    dropout.key = philox_key(5, RngPurpose::kAttentionDropout, 1);
    attention_forward(o.data(), lse.data(), qkv.data(), B, T, NH, KV, HD, dropout);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), o.data(), lse.data(), B, T, NH, KV,
                       HD, dropout);
    append(out, o), append(out, lse), append(out, dqkv);
    std::vector<float> e(x.size());
    exp_f32(e.data(), x.data(), static_cast<int64_t>(x.size()));
    append(out, e);
    return out;
  }, kFusedTolerance);
}

TEST(KernelTargets, BlockedGemmIsBitwiseEqualOnFmaTargetsAndCloseOnBaseline) {
  // Every target sums in the same order (gemm_packed.h): the targets with FMA give the same bits
  // whatever their register blocking; x86-64 baseline rounds each multiply and add apart.
  // Shapes past the depth block and with tails of every blocking; fp32 and bf16 operands.
  const int64_t M = 29, N = 53, K = 777;
  const auto a = random_normal(M * K, 31), b = random_normal(K * N, 32);
  std::vector<bf16> a16(a.size()), b16(b.size());
  convert(a16.data(), a.data(), static_cast<int64_t>(a.size()));
  convert(b16.data(), b.data(), static_cast<int64_t>(b.size()));
  const auto run = [&] {
    std::vector<double> out;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        std::vector<float> c(M * N, 0.5f);
        std::vector<bf16> c16(M * N);
        packed_gemm(ta, tb, M, N, K, 1.0f, a.data(), ta ? M : K, b.data(), tb ? K : N, 1.0f,
                    c.data(), N);
        packed_gemm(ta, tb, M, N, K, 1.0f, a16.data(), ta ? M : K, b16.data(), tb ? K : N, 0.0f,
                    c16.data(), N);
        append(out, c), append(out, c16);
      }
    return out;
  };
  expect_close_across_targets(run, kFusedTolerance);
  std::vector<std::pair<CpuTarget, std::vector<double>>> fused;
  for (const auto& result : on_every_target(run))
    if (result.first != CpuTarget::kBaseline) fused.push_back(result);
  for (const auto& [target, values] : fused)
    EXPECT_EQ(std::memcmp(values.data(), fused[0].second.data(), values.size() * sizeof(double)),
              0)
        << cpu_target_name(target) << " vs " << cpu_target_name(fused[0].first);
}

}  // namespace
}  // namespace tessera::kernels
