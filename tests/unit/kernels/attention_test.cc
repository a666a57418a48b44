#include "tessera/kernels/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tessera/core/philox.h"
#include "testing/numeric.h"
#include "testing/qkv_shape.h"

namespace tessera::kernels {
namespace {

using Shape = testing::QkvShape;

// The header's dropout rule, written out with the scalar Philox.
bool reference_kept(const AttentionDropout& d, const Shape& s, int64_t b, int h, int64_t q,
                    int64_t k) {
  const int64_t heads = d.num_heads_global > 0 ? d.num_heads_global : s.NH;
  const uint64_t row = ((d.sample_offset + b) * heads + d.head_offset + h) * s.T + q;
  const uint32_t lane = philox_block(d.key, row, k / 4)[k % 4];
  return !(uint_to_unit_float(lane) < d.p);
}

// reference_kept for every (b, h, q, k), k <= q, computed once per test (empty when p = 0).
std::vector<uint8_t> reference_mask(const Shape& s, const AttentionDropout& d) {
  std::vector<uint8_t> mask;
  if (d.p == 0.0f) return mask;
  mask.resize(s.B * s.NH * s.T * s.T);
  for (int64_t b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int64_t q = 0; q < s.T; ++q)
        for (int64_t k = 0; k <= q; ++k)
          mask[((b * s.NH + h) * s.T + q) * s.T + k] = reference_kept(d, s, b, h, q, k);
  return mask;
}

// Naive causal attention in double with the full softmax; lse (may be null) as the kernel's.
// mask from reference_mask(s, d).
std::vector<double> reference_forward(const std::vector<float>& qkv, const Shape& s,
                                      const AttentionDropout& d, const std::vector<uint8_t>& mask,
                                      std::vector<double>* lse = nullptr) {
  std::vector<double> out(s.out_size(), 0.0);
  if (lse) lse->assign(s.lse_size(), 0.0);
  const double scale = 1.0 / std::sqrt(double(s.HD));
  const int group = s.NH / s.KV;
  std::vector<double> p(s.T);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.NH; ++h) {
      const int64_t qc = int64_t{h} * s.HD, kc = (int64_t{s.NH} + h / group) * s.HD;
      const int64_t vc = (int64_t{s.NH} + s.KV + h / group) * s.HD;
      for (int64_t q = 0; q < s.T; ++q) {
        const float* qrow = &qkv[(b * s.T + q) * s.width() + qc];
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t k = 0; k <= q; ++k) {
          const float* krow = &qkv[(b * s.T + k) * s.width() + kc];
          double dotp = 0.0;
          for (int e = 0; e < s.HD; ++e) dotp += double(qrow[e]) * krow[e];
          p[k] = dotp * scale;
          mx = std::max(mx, p[k]);
        }
        double sum = 0.0;
        for (int64_t k = 0; k <= q; ++k) sum += (p[k] = std::exp(p[k] - mx));
        if (lse) (*lse)[(b * s.NH + h) * s.T + q] = mx + std::log(sum);
        double* orow = &out[(b * s.T + q) * s.NH * s.HD + qc];
        for (int64_t k = 0; k <= q; ++k) {
          double w = p[k] / sum;
          if (d.p > 0.0f)
            w = mask[((b * s.NH + h) * s.T + q) * s.T + k] ? w / (1.0 - double(d.p)) : 0.0;
          const float* vrow = &qkv[(b * s.T + k) * s.width() + vc];
          for (int e = 0; e < s.HD; ++e) orow[e] += w * vrow[e];
        }
      }
    }
  }
  return out;
}

struct Result {
  std::vector<float> out, lse;
};

Result run_forward(const std::vector<float>& qkv, const Shape& s, const AttentionDropout& d) {
  Result r{std::vector<float>(s.out_size()), std::vector<float>(s.lse_size())};
  attention_forward(r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.NH, s.KV, s.HD, d);
  return r;
}

std::vector<float> run_backward(const std::vector<float>& qkv, const std::vector<float>& dout,
                                const Shape& s, const AttentionDropout& d) {
  const Result fwd = run_forward(qkv, s, d);
  // dqkv is overwritten: start from NaN so any element left unwritten fails the comparison.
  std::vector<float> dqkv(s.qkv_size(), std::numeric_limits<float>::quiet_NaN());
  attention_backward(dqkv.data(), dout.data(), qkv.data(), fwd.out.data(), fwd.lse.data(), s.B, s.T,
                     s.NH, s.KV, s.HD, d);
  return dqkv;
}

void expect_forward_matches_reference(const Shape& s, const AttentionDropout& d) {
  const std::vector<float> qkv = testing::random_normal(s.qkv_size(), 11);
  std::vector<double> ref_lse;
  const std::vector<double> ref = reference_forward(qkv, s, d, reference_mask(s, d), &ref_lse);
  const Result r = run_forward(qkv, s, d);
  // fp32 accumulation over at most T * HD products of O(1) values, against double: ~1e-6.
  EXPECT_LT(testing::max_scaled_error(r.out, ref), 2e-6);
  EXPECT_LT(testing::max_scaled_error(r.lse, ref_lse), 2e-6);
}

// Central differences of the double reference (accurate to ~1e-6 with h = 1e-2 on O(1)
// inputs) against the kernel's backward, on every stride-th element of qkv (stride 1: all;
// an odd stride still reaches q, k and v of every token while keeping the test fast).
void expect_backward_matches_fd(const Shape& s, const AttentionDropout& d, int64_t stride = 1) {
  std::vector<float> qkv = testing::random_normal(s.qkv_size(), 21);
  const std::vector<float> probe = testing::random_normal(s.out_size(), 22);
  const std::vector<float> dqkv = run_backward(qkv, probe, s, d);
  const std::vector<uint8_t> mask = reference_mask(s, d);
  // Truncation error O(h^2 f''') and the fp32 rounding of x +- h (relative ~1e-5 of h) keep
  // the FD gradient within ~1e-5 of the true one relative to its scale (measured 1e-6 to 5e-6
  // with the fp32 kernel), so 5e-5 leaves a 10x margin yet catches any wrong term.
  EXPECT_LT(testing::strided_fd_error(
                qkv, dqkv, probe, stride,
                [&](const std::vector<float>& x) { return reference_forward(x, s, d, mask); }),
            5e-5);
}

TEST(AttentionForward, MatchesReferenceMha) {
  expect_forward_matches_reference({2, 70, 2, 2, 16}, {});
  expect_forward_matches_reference({1, 37, 3, 3, 8}, {});
}

TEST(AttentionForward, MatchesReferenceGqa) {
  expect_forward_matches_reference({2, 37, 4, 2, 8}, {});
  expect_forward_matches_reference({1, 70, 4, 1, 16}, {});
  // Three query blocks: off-diagonal blocks and the online-softmax rescaling across two of them.
  expect_forward_matches_reference({1, 150, 4, 2, 8}, {});
  // A single token: the output is its own value row.
  expect_forward_matches_reference({2, 1, 2, 1, 8}, {});
}

TEST(AttentionForward, LargeHeadDimUsesSeveralColumnPanels) {
  // HD = 80 > 64 exercises a second (partial) 16-lane panel set in the P V product.
  expect_forward_matches_reference({1, 67, 2, 1, 80}, {});
}

TEST(AttentionBackward, MatchesFiniteDifferencesMha) {
  expect_backward_matches_fd({1, 37, 2, 2, 8}, {});
}

TEST(AttentionBackward, MatchesFiniteDifferencesGqaAcrossBlocks) {
  // T = 70: two key blocks, the second partial; KV = 1 sums two query heads into one dK/dV.
  expect_backward_matches_fd({1, 70, 2, 1, 8}, {}, 3);
}

TEST(AttentionBackward, MatchesFiniteDifferencesLargeHeadDim) {
  // HD = 80: the dQ, dK, dV products span two column panels (64 + 16).
  expect_backward_matches_fd({1, 20, 1, 1, 80}, {}, 7);
}

TEST(AttentionBackward, MatchesFiniteDifferencesGqa) {
  expect_backward_matches_fd({2, 21, 4, 2, 8}, {}, 3);
}

AttentionDropout test_dropout(float p) {
  AttentionDropout d;
  d.p = p;
  d.key = philox_key(1234, RngPurpose::kAttentionDropout, 3);
  d.sample_offset = 5;
  d.head_offset = 2;
  d.num_heads_global = 8;
  return d;
}

TEST(AttentionDropout, ForwardMatchesReferenceMask) {
  expect_forward_matches_reference({2, 70, 4, 2, 8}, test_dropout(0.2f));
  expect_forward_matches_reference({1, 150, 2, 2, 16}, test_dropout(0.5f));
}

TEST(AttentionDropout, BackwardMatchesFiniteDifferences) {
  expect_backward_matches_fd({1, 70, 2, 1, 8}, test_dropout(0.25f), 3);
}

TEST(AttentionDropout, ShardingInvariance) {
  // Full problem: 3 samples, 4 query heads in 2 groups. Shard: samples [1, 3), heads [2, 4)
  // (= group 1), as a data-parallel x tensor-parallel rank would hold them.
  const Shape full{3, 70, 4, 2, 8};
  const Shape part{2, 70, 2, 1, 8};
  const int64_t b0 = 1;
  const int h0 = 2, g0 = 1;
  AttentionDropout d_full = test_dropout(0.3f);
  d_full.sample_offset = 0;
  d_full.head_offset = 0;
  d_full.num_heads_global = 0;
  AttentionDropout d_part = d_full;
  d_part.sample_offset = b0;
  d_part.head_offset = h0;
  d_part.num_heads_global = full.NH;

  const std::vector<float> qkv = testing::random_normal(full.qkv_size(), 31);
  const std::vector<float> dout = testing::random_normal(full.out_size(), 32);
  // Column c of a part token maps to column map(c) of the full token.
  auto map_qkv_col = [&](int64_t c) -> int64_t {
    const int64_t head = c / part.HD, e = c % part.HD;
    if (head < part.NH) return (h0 + head) * full.HD + e;
    if (head < part.NH + part.KV) return (full.NH + g0) * full.HD + e;
    return (full.NH + full.KV + g0) * full.HD + e;
  };
  std::vector<float> qkv_part(part.qkv_size()), dout_part(part.out_size());
  for (int64_t b = 0; b < part.B; ++b) {
    for (int64_t t = 0; t < part.T; ++t) {
      for (int64_t c = 0; c < part.width(); ++c)
        qkv_part[(b * part.T + t) * part.width() + c] =
            qkv[((b0 + b) * full.T + t) * full.width() + map_qkv_col(c)];
      for (int64_t c = 0; c < part.NH * part.HD; ++c)
        dout_part[(b * part.T + t) * part.NH * part.HD + c] =
            dout[((b0 + b) * full.T + t) * full.NH * full.HD + h0 * full.HD + c];
    }
  }

  const Result rf = run_forward(qkv, full, d_full), rp = run_forward(qkv_part, part, d_part);
  const std::vector<float> gf = run_backward(qkv, dout, full, d_full);
  const std::vector<float> gp = run_backward(qkv_part, dout_part, part, d_part);
  // Each (sample, head) is computed by the same code in the same order whatever else is in the
  // batch, so the shard must reproduce the full computation bit for bit.
  for (int64_t b = 0; b < part.B; ++b) {
    for (int64_t t = 0; t < part.T; ++t) {
      for (int64_t c = 0; c < part.NH * part.HD; ++c)
        ASSERT_EQ(rp.out[(b * part.T + t) * part.NH * part.HD + c],
                  rf.out[((b0 + b) * full.T + t) * full.NH * full.HD + h0 * full.HD + c]);
      for (int h = 0; h < part.NH; ++h)
        ASSERT_EQ(rp.lse[(b * part.NH + h) * part.T + t],
                  rf.lse[((b0 + b) * full.NH + h0 + h) * full.T + t]);
      for (int64_t c = 0; c < part.width(); ++c)
        ASSERT_EQ(gp[(b * part.T + t) * part.width() + c],
                  gf[((b0 + b) * full.T + t) * full.width() + map_qkv_col(c)]);
    }
  }
}

TEST(AttentionBackward, IndependentOfThreadCount) {
  const Shape s{2, 150, 4, 2, 16};
  const AttentionDropout d = test_dropout(0.1f);
  const std::vector<float> qkv = testing::random_normal(s.qkv_size(), 41);
  const std::vector<float> dout = testing::random_normal(s.out_size(), 42);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result f1 = run_forward(qkv, s, d);
  const std::vector<float> g1 = run_backward(qkv, dout, s, d);
  omp_set_num_threads(2);
  const Result f2 = run_forward(qkv, s, d);
  const std::vector<float> g2 = run_backward(qkv, dout, s, d);
  omp_set_num_threads(saved);
  // No float atomics and fixed summation orders: bitwise equal.
  EXPECT_EQ(f1.out, f2.out);
  EXPECT_EQ(f1.lse, f2.lse);
  EXPECT_EQ(g1, g2);
}

TEST(AttentionBf16, MatchesFp32OnTheSameInputs) {
  const Shape s{2, 70, 4, 2, 16};
  const AttentionDropout d = test_dropout(0.1f);
  const std::vector<float> qkv = testing::round_to_bf16(testing::random_normal(s.qkv_size(), 51));
  const std::vector<float> dout = testing::round_to_bf16(testing::random_normal(s.out_size(), 52));
  const Result f32 = run_forward(qkv, s, d);
  const std::vector<float> g32 = run_backward(qkv, dout, s, d);

  const std::vector<bf16> qkv16 = testing::to_bf16(qkv), dout16 = testing::to_bf16(dout);
  std::vector<bf16> out16(s.out_size()), dqkv16(s.qkv_size());
  std::vector<float> lse16(s.lse_size());
  attention_forward(out16.data(), lse16.data(), qkv16.data(), s.B, s.T, s.NH, s.KV, s.HD, d);
  attention_backward(dqkv16.data(), dout16.data(), qkv16.data(), out16.data(), lse16.data(), s.B,
                     s.T, s.NH, s.KV, s.HD, d);
  // Same inputs, same fp32 arithmetic: lse agrees to fp32 rounding; out differs only by its
  // final rounding to bf16 (at most half an ulp: 2^-8 of the value).
  EXPECT_LT(testing::max_scaled_error(lse16, f32.lse), 1e-6);
  EXPECT_LT(testing::max_scaled_error(testing::to_float(out16), f32.out), 4e-3);
  // Backward additionally reads the bf16-rounded out (through rowsum(dout * out)) and rounds
  // dqkv to bf16: a few bf16 ulps of the gradient's scale.
  EXPECT_LT(testing::max_scaled_error(testing::to_float(dqkv16), g32), 1.5e-2);
}

}  // namespace
}  // namespace tessera::kernels
