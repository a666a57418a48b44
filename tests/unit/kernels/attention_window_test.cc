// Sliding-window attention in the flash attention kernel (window > 0, Mistral's) against a naive
// double-precision reference: query t sees keys t - window < j <= t (Transformers'
// masking_utils.sliding_window_overlay: kv_idx > q_idx - sliding_window, with the causal
// kv_idx <= q_idx), and within its document when doc_start is given too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tessera/kernels/attention.h"
#include "testing/numeric.h"
#include "testing/qkv_shape.h"

namespace tessera::kernels {
namespace {

using Shape = testing::QkvShape;

// The reference: every (query, key) pair written out, the window applied as the definition says.
std::vector<double> reference_forward(const std::vector<float>& qkv, const Shape& s, int64_t window,
                                      const std::vector<int32_t>* doc = nullptr,
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
        const auto visible = [&](int64_t k) {
          return k <= q && k > q - window && (doc == nullptr || k >= (*doc)[b * s.T + q]);
        };
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t k = 0; k < s.T; ++k) {
          if (!visible(k)) continue;
          double d = 0;
          for (int e = 0; e < s.HD; ++e)
            d += double(qkv[(b * s.T + q) * s.width() + qc + e]) *
                 qkv[(b * s.T + k) * s.width() + kc + e];
          p[k] = d * scale;
          mx = std::max(mx, p[k]);
        }
        double sum = 0;
        for (int64_t k = 0; k < s.T; ++k)
          if (visible(k)) sum += (p[k] = std::exp(p[k] - mx));
        if (lse) (*lse)[(b * s.NH + h) * s.T + q] = mx + std::log(sum);
        for (int64_t k = 0; k < s.T; ++k) {
          if (!visible(k)) continue;
          for (int e = 0; e < s.HD; ++e)
            out[(b * s.T + q) * s.NH * s.HD + qc + e] +=
                p[k] / sum * qkv[(b * s.T + k) * s.width() + vc + e];
        }
      }
    }
  return out;
}

TEST(AttentionWindow, ForwardMatchesReferenceAcrossBlocks) {
  // T = 150 spans three 64-key blocks: window 40 makes queries of block 2 skip block 0 whole and
  // see part of block 1; window 1 is attention to the token itself; 64 is a block's width.
  const Shape s{2, 150, 4, 2, 24};
  const std::vector<float> qkv = testing::random_normal(s.qkv_size(), 71);
  for (int64_t window : {40, 1, 64, 149}) {
    std::vector<double> ref_lse;
    const std::vector<double> ref = reference_forward(qkv, s, window, nullptr, &ref_lse);
    std::vector<float> out(s.out_size()), lse(s.B * s.NH * s.T);
    attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.KV, s.HD,
                      AttentionDropout{}, nullptr, window);
    // fp32 accumulation over at most T * HD products of O(1) values, against double: ~1e-6.
    EXPECT_LT(testing::max_scaled_error(out, ref), 2e-6) << "window " << window;
    EXPECT_LT(testing::max_scaled_error(lse, ref_lse), 2e-6) << "window " << window;
  }
}

TEST(AttentionWindow, CombinesWithDocumentStarts) {
  // Sample 0's document starts at 100: queries from 100 on see max(100, t - 29) onwards.
  const Shape s{2, 130, 2, 1, 16};
  std::vector<int32_t> doc(s.B * s.T, 0);
  for (int64_t t = 100; t < s.T; ++t) doc[t] = 100;
  const std::vector<float> qkv = testing::random_normal(s.qkv_size(), 72);
  const std::vector<double> ref = reference_forward(qkv, s, 30, &doc);
  std::vector<float> out(s.out_size()), lse(s.B * s.NH * s.T);
  attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.KV, s.HD, {}, doc.data(),
                    30);
  EXPECT_LT(testing::max_scaled_error(out, ref), 2e-6);
}

TEST(AttentionWindow, WindowOfTheWholeSequenceIsExactlyCausal) {
  const Shape s{2, 77, 2, 2, 16};
  const std::vector<float> qkv = testing::random_normal(s.qkv_size(), 73);
  std::vector<float> a(s.out_size()), b(s.out_size()), la(s.B * s.NH * s.T), lb(la.size());
  attention_forward(a.data(), la.data(), qkv.data(), s.B, s.T, s.NH, s.KV, s.HD, {});
  for (int64_t window : {int64_t{0}, s.T, s.T + 5}) {
    attention_forward(b.data(), lb.data(), qkv.data(), s.B, s.T, s.NH, s.KV, s.HD, {}, nullptr,
                      window);
    EXPECT_EQ(a, b) << "window " << window;  // the same operations in the same order
    EXPECT_EQ(la, lb) << "window " << window;
  }
}

TEST(AttentionWindow, BoundaryIsWindowKeysIncludingTheQuery) {
  // Query 50 with window 8 sees keys 43..50: changing key 42 leaves its output alone, changing
  // key 43 does not.
  const Shape s{1, 64, 1, 1, 16};
  const int64_t window = 8, q = 50;
  std::vector<float> qkv = testing::random_normal(s.qkv_size(), 74);
  const auto output_of_q = [&](const std::vector<float>& x) {
    std::vector<float> out(s.out_size()), lse(s.T);
    attention_forward(out.data(), lse.data(), x.data(), 1, s.T, 1, 1, s.HD, {}, nullptr, window);
    return std::vector<float>(out.begin() + q * s.HD, out.begin() + (q + 1) * s.HD);
  };
  const std::vector<float> base = output_of_q(qkv);
  for (int64_t key : {q - window, q - window + 1}) {
    std::vector<float> changed = qkv;
    for (int64_t c = s.HD; c < 3 * s.HD; ++c) changed[key * s.width() + c] += 1.0f;  // k and v
    if (key == q - window)
      EXPECT_EQ(output_of_q(changed), base) << "key " << key << " is outside the window";
    else
      EXPECT_NE(output_of_q(changed), base) << "key " << key << " is inside the window";
  }
}

TEST(AttentionWindow, BackwardMatchesFiniteDifferences) {
  // T = 100: two key blocks; window 20 hides block 0 from the queries after 83.
  const Shape s{2, 100, 2, 1, 8};
  const int64_t window = 20;
  std::vector<float> qkv = testing::random_normal(s.qkv_size(), 75);
  const std::vector<float> probe = testing::random_normal(s.out_size(), 76);
  std::vector<float> out(s.out_size()), lse(s.B * s.NH * s.T);
  attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.KV, s.HD, {}, nullptr,
                    window);
  std::vector<float> dqkv(s.qkv_size(), std::numeric_limits<float>::quiet_NaN());
  attention_backward(dqkv.data(), probe.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.NH,
                     s.KV, s.HD, {}, nullptr, window);
  // Every 7th element (odd stride: reaches q, k and v of every token) keeps the test fast.
  const int64_t stride = 7;
  // As attention_test.cc: FD of the double reference is good to ~1e-5 of the gradient's scale.
  EXPECT_LT(testing::strided_fd_error(
                qkv, dqkv, probe, stride,
                [&](const std::vector<float>& x) { return reference_forward(x, s, window); }),
            5e-5);
}

}  // namespace
}  // namespace tessera::kernels
