// Document masking in the flash attention kernel (doc_start, --reset-attention-mask) against a
// naive double-precision reference: query t sees keys [doc_start[t], t] only.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tessera/core/philox.h"
#include "tessera/kernels/attention.h"
#include "testing/numeric.h"
#include "testing/qkv_shape.h"

namespace tessera::kernels {
namespace {

using Shape = testing::QkvShape;

// doc_start (B, T) for documents ending at the given EOD positions (per sample): the token after
// an EOD starts a new document, as data::ltor_masks computes it.
std::vector<int32_t> doc_starts(const Shape& s, const std::vector<std::vector<int>>& eods) {
  std::vector<int32_t> ds(s.B * s.T);
  for (int64_t b = 0; b < s.B; ++b) {
    int32_t start = 0;
    for (int64_t t = 0; t < s.T; ++t) {
      ds[b * s.T + t] = start;
      for (int e : eods[b])
        if (e == t) start = static_cast<int32_t>(t + 1);
    }
  }
  return ds;
}

std::vector<double> reference_forward(const std::vector<float>& qkv, const Shape& s,
                                      const std::vector<int32_t>& ds,
                                      std::vector<double>* lse = nullptr) {
  std::vector<double> out(s.out_size(), 0.0);
  if (lse) lse->assign(s.B * s.NH * s.T, 0.0);
  const double scale = 1.0 / std::sqrt(double(s.HD));
  const int group = s.NH / s.KV;
  std::vector<double> p(s.T);
  for (int64_t b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h) {
      const int64_t qc = int64_t{h} * s.HD, kc = (int64_t{s.NH} + h / group) * s.HD;
      const int64_t vc = (int64_t{s.NH} + s.KV + h / group) * s.HD;
      for (int64_t q = 0; q < s.T; ++q) {
        const int64_t k_begin = ds[b * s.T + q];
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t k = k_begin; k <= q; ++k) {
          double d = 0;
          for (int e = 0; e < s.HD; ++e)
            d += double(qkv[(b * s.T + q) * s.width() + qc + e]) *
                 qkv[(b * s.T + k) * s.width() + kc + e];
          p[k] = d * scale;
          mx = std::max(mx, p[k]);
        }
        double sum = 0;
        for (int64_t k = k_begin; k <= q; ++k) sum += (p[k] = std::exp(p[k] - mx));
        if (lse) (*lse)[(b * s.NH + h) * s.T + q] = mx + std::log(sum);
        for (int64_t k = k_begin; k <= q; ++k)
          for (int e = 0; e < s.HD; ++e)
            out[(b * s.T + q) * s.NH * s.HD + qc + e] +=
                p[k] / sum * qkv[(b * s.T + k) * s.width() + vc + e];
      }
    }
  return out;
}

TEST(AttentionDocMask, ForwardMatchesReferenceAcrossBlocks) {
  // T = 150 spans three 64-key blocks and is not a multiple of 16. Sample 0: documents end at
  // 2, 63, 64 and 129, so queries 130..149 see no key of blocks 0 and 1 (skipped) and a
  // one-token document sits on a block edge; sample 1: one EOD at 0 (a one-token first
  // document); sample 2: no EOD (plain causal).
  const Shape s{3, 150, 4, 2, 24};
  const std::vector<int32_t> ds = doc_starts(s, {{2, 63, 64, 129}, {0}, {}});
  const std::vector<float> qkv = testing::random_normal(s.qkv_size(), 31);
  std::vector<double> ref_lse;
  const std::vector<double> ref = reference_forward(qkv, s, ds, &ref_lse);
  std::vector<float> out(s.out_size()), lse(s.B * s.NH * s.T);
  attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.KV, s.HD,
                    AttentionDropout{}, ds.data());
  // fp32 accumulation over at most T * HD products of O(1) values, against double: ~1e-6.
  EXPECT_LT(testing::max_scaled_error(out, ref), 2e-6);
  EXPECT_LT(testing::max_scaled_error(lse, ref_lse), 2e-6);
}

TEST(AttentionDocMask, AllZeroStartsAreExactlyCausal) {
  const Shape s{2, 77, 2, 2, 16};
  const std::vector<float> qkv = testing::random_normal(s.qkv_size(), 32);
  const std::vector<int32_t> zeros(s.B * s.T, 0);
  std::vector<float> a(s.out_size()), b(s.out_size()), la(s.B * s.NH * s.T), lb(la.size());
  attention_forward(a.data(), la.data(), qkv.data(), s.B, s.T, s.NH, s.KV, s.HD, {});
  attention_forward(b.data(), lb.data(), qkv.data(), s.B, s.T, s.NH, s.KV, s.HD, {}, zeros.data());
  EXPECT_EQ(a, b);  // the same operations in the same order: bitwise equal
  EXPECT_EQ(la, lb);
}

TEST(AttentionDocMask, BackwardMatchesFiniteDifferences) {
  // T = 70: two key blocks; documents end at 5 and 66 in sample 0 (the last three queries skip
  // block 0 in backward too), at 30 in sample 1.
  const Shape s{2, 70, 2, 1, 8};
  const std::vector<int32_t> ds = doc_starts(s, {{5, 66}, {30}});
  std::vector<float> qkv = testing::random_normal(s.qkv_size(), 41);
  const std::vector<float> probe = testing::random_normal(s.out_size(), 42);
  std::vector<float> out(s.out_size()), lse(s.B * s.NH * s.T);
  attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.KV, s.HD, {}, ds.data());
  std::vector<float> dqkv(s.qkv_size(), std::numeric_limits<float>::quiet_NaN());
  attention_backward(dqkv.data(), probe.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.NH,
                     s.KV, s.HD, {}, ds.data());
  // Every 7th element (odd stride: reaches q, k and v of every token) keeps the test fast.
  const int64_t stride = 7;
  // As attention_test.cc: FD of the double reference is good to ~1e-5 of the gradient's scale.
  EXPECT_LT(testing::strided_fd_error(
                qkv, dqkv, probe, stride,
                [&](const std::vector<float>& x) { return reference_forward(x, s, ds); }),
            5e-5);
}

TEST(AttentionDocMask, Bf16MatchesFp32OnTheSameInputs) {
  // The masking is shared by every storage type; with dropout too (kept probabilities of hidden
  // keys must stay zero).
  const Shape s{2, 90, 4, 2, 16};
  const std::vector<int32_t> ds = doc_starts(s, {{10, 70}, {}});
  AttentionDropout d;
  d.p = 0.1f;
  d.key = philox_key(3, RngPurpose::kAttentionDropout, 0);
  const std::vector<float> qkv = testing::round_to_bf16(testing::random_normal(s.qkv_size(), 61));
  const std::vector<float> dout = testing::round_to_bf16(testing::random_normal(s.out_size(), 62));
  std::vector<float> out(s.out_size()), lse(s.B * s.NH * s.T), dqkv(s.qkv_size());
  attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.KV, s.HD, d, ds.data());
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.NH,
                     s.KV, s.HD, d, ds.data());
  const std::vector<bf16> qkv16 = testing::to_bf16(qkv), dout16 = testing::to_bf16(dout);
  std::vector<bf16> out16(s.out_size()), dqkv16(s.qkv_size());
  std::vector<float> lse16(lse.size());
  attention_forward(out16.data(), lse16.data(), qkv16.data(), s.B, s.T, s.NH, s.KV, s.HD, d,
                    ds.data());
  attention_backward(dqkv16.data(), dout16.data(), qkv16.data(), out16.data(), lse16.data(), s.B,
                     s.T, s.NH, s.KV, s.HD, d, ds.data());
  // As AttentionBf16.MatchesFp32OnTheSameInputs: the same fp32 arithmetic, outputs rounded to
  // bf16 (half an ulp, 2^-8 relative), backward reading the rounded out: a few ulps.
  EXPECT_LT(testing::max_scaled_error(lse16, lse), 1e-6);
  EXPECT_LT(testing::max_scaled_error(testing::to_float(out16), out), 4e-3);
  EXPECT_LT(testing::max_scaled_error(testing::to_float(dqkv16), dqkv), 1.5e-2);
  // Keys 0..10 of sample 0 (its first document) get no gradient from queries after 10: compare
  // with a run where those later queries' output gradients are zero.
  std::vector<float> dout_first(dout.size(), 0.0f), dqkv_first(dqkv.size());
  for (int64_t t = 0; t <= 10; ++t)
    for (int64_t e = 0; e < s.NH * s.HD; ++e)
      dout_first[t * s.NH * s.HD + e] = dout[t * s.NH * s.HD + e];
  attention_backward(dqkv_first.data(), dout_first.data(), qkv.data(), out.data(), lse.data(), s.B,
                     s.T, s.NH, s.KV, s.HD, d, ds.data());
  for (int64_t t = 0; t <= 10; ++t)
    for (int64_t c = int64_t{s.NH} * s.HD; c < s.width(); ++c)  // keys and values of token t
      EXPECT_EQ(dqkv_first[t * s.width() + c], dqkv[t * s.width() + c]) << "token " << t;
}

}  // namespace
}  // namespace tessera::kernels
