// The block kernels of context parallelism (kernels/attention_block.h) against the
// whole-sequence kernel (attention.h): a sequence cut into query and key segments of uneven
// lengths, starts off multiples of 4 and of the 64-row tile, every (query segment, key segment)
// pair computed alone and merged by log-sum-exp, gives the whole attention's output and
// log-sum-exp; the pairs' backward with the whole lse and delta sum to its dQ, dK and dV. With
// GQA, dropout (keyed by whole-sequence coordinates) and document masks, fp32 and bf16 inputs.
#include "tessera/kernels/attention_block.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/kernels/attention.h"
#include "testing/numeric.h"
#include "testing/qkv_shape.h"

namespace tessera::kernels {
namespace {

using Shape = testing::QkvShape;

template <typename F>
std::vector<F> cast(const std::vector<float>& v) {
  std::vector<F> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = from_f32<F>(v[i]);
  return out;
}

// Segments [begin, end) of a sequence of T: uneven, one starting off a multiple of 4, one
// longer than a 64-row tile.
std::vector<std::pair<int64_t, int64_t>> segments(int64_t T) {
  return {{0, 5}, {5, 19}, {19, 90}, {90, T}};
}

template <typename F>
void check_blocks_match_whole(bool documents, float dropout_p, double tol) {
  const Shape s{2, 120, 4, 2, 16};
  const int64_t T = s.T, W = s.width(), O = int64_t{s.NH} * s.HD;
  const std::vector<F> qkv = cast<F>(testing::random_normal(s.qkv_size(), 1));
  const std::vector<F> dout = cast<F>(testing::random_normal(s.out_size(), 2));
  std::vector<int32_t> doc;
  if (documents) {  // documents of 23 tokens, shifted per sample
    doc.resize(s.B * T);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = 0; t < T; ++t)
        doc[b * T + t] = static_cast<int32_t>(t < 7 + b ? 0 : (t - 7 - b) / 23 * 23 + 7 + b);
  }
  AttentionDropout d;
  d.p = dropout_p;
  d.key = philox_key(5, RngPurpose::kAttentionDropout, 1);
  d.sample_offset = 3;
  d.head_offset = 4;
  d.num_heads_global = 12;

  // The whole sequence.
  std::vector<F> out(s.out_size()), dqkv(s.qkv_size());
  std::vector<float> lse(s.lse_size());
  attention_forward(out.data(), lse.data(), qkv.data(), s.B, T, s.NH, s.KV, s.HD, d,
                    documents ? doc.data() : nullptr);
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, T, s.NH,
                     s.KV, s.HD, d, documents ? doc.data() : nullptr);

  // Pairs of segments, merged by log-sum-exp.
  std::vector<float> o(s.out_size(), 0.0f), L(s.lse_size(), -INFINITY);
  std::vector<float> ob(s.out_size()), lb(s.lse_size());
  const auto segs = segments(T);
  auto block = [&](std::pair<int64_t, int64_t> qs, std::pair<int64_t, int64_t> ks) {
    AttentionBlock a;
    a.B = s.B;
    a.q_len = qs.second - qs.first;
    a.k_len = ks.second - ks.first;
    a.q_pos = qs.first;
    a.k_pos = ks.first;
    a.seq = T;
    a.NH = s.NH;
    a.KV = s.KV;
    a.HD = s.HD;
    a.q_sample = a.kv_sample = T * W;
    a.q_ld = a.kv_ld = W;
    a.o_sample = T * O;
    a.o_ld = O;
    a.lse_ld = T;
    if (documents) {
      a.doc_start = doc.data() + qs.first;
      a.doc_sample = T;
    }
    return a;
  };
  for (const auto& qs : segs)
    for (const auto& ks : segs) {
      const AttentionBlock a = block(qs, ks);
      const F* base = qkv.data();
      attention_block_forward(ob.data() + qs.first * O, lb.data() + qs.first, base + qs.first * W,
                              base + ks.first * W + s.NH * s.HD,
                              base + ks.first * W + (s.NH + s.KV) * s.HD, a, d);
      for (int64_t b = 0; b < s.B; ++b)
        for (int h = 0; h < s.NH; ++h)
          for (int64_t t = qs.first; t < qs.second; ++t) {
            const int64_t li = (b * s.NH + h) * T + t;
            const float lnew = std::max(L[li], lb[li]) == -INFINITY
                                   ? -INFINITY
                                   : std::max(L[li], lb[li]) +
                                         std::log(std::exp(L[li] - std::max(L[li], lb[li])) +
                                                  std::exp(lb[li] - std::max(L[li], lb[li])));
            for (int c = 0; c < s.HD; ++c) {
              const int64_t oi = (b * T + t) * O + h * s.HD + c;
              const float wa = L[li] == -INFINITY ? 0.0f : std::exp(L[li] - lnew);
              const float wb = lb[li] == -INFINITY ? 0.0f : std::exp(lb[li] - lnew);
              o[oi] = o[oi] * wa + ob[oi] * wb;
            }
            L[li] = lnew;
          }
    }
  for (int64_t i = 0; i < s.lse_size(); ++i) ASSERT_NEAR(L[i], lse[i], 1e-4) << "lse " << i;
  for (int64_t i = 0; i < s.out_size(); ++i)
    ASSERT_NEAR(o[i], to_f32(out[i]), tol * (1 + std::fabs(to_f32(out[i])))) << "out " << i;

  // Backward: every pair adds its share, given the whole lse and delta.
  std::vector<float> delta(s.lse_size());
  for (int64_t b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        float acc = 0;
        for (int c = 0; c < s.HD; ++c) {
          const int64_t oi = (b * T + t) * O + h * s.HD + c;
          acc += to_f32(dout[oi]) * to_f32(out[oi]);
        }
        delta[(b * s.NH + h) * T + t] = acc;
      }
  std::vector<float> dq(s.out_size(), 0.0f), dkv(s.qkv_size(), 0.0f);
  for (const auto& qs : segs)
    for (const auto& ks : segs) {
      const AttentionBlock a = block(qs, ks);
      const F* base = qkv.data();
      attention_block_backward(dq.data() + qs.first * O, dkv.data() + ks.first * W + s.NH * s.HD,
                               dkv.data() + ks.first * W + (s.NH + s.KV) * s.HD,
                               dout.data() + qs.first * O, base + qs.first * W,
                               base + ks.first * W + s.NH * s.HD,
                               base + ks.first * W + (s.NH + s.KV) * s.HD, lse.data() + qs.first,
                               delta.data() + qs.first, a, d);
    }
  double scale = 0;
  for (const F& x : dqkv) scale = std::max(scale, std::fabs(double(to_f32(x))));
  ASSERT_GT(scale, 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < W; ++c) {
        const int64_t i = (b * T + t) * W + c;
        const float got = c < O ? dq[(b * T + t) * O + c] : dkv[i];
        ASSERT_NEAR(got, to_f32(dqkv[i]), tol * scale)
            << "dqkv sample " << b << " token " << t << " column " << c;
      }
}

TEST(AttentionBlock, PairsMergedGiveTheWholeAttention) {
  check_blocks_match_whole<float>(false, 0.0f, 2e-5);
}

TEST(AttentionBlock, WithDropoutAndDocumentsGiveTheWholeAttention) {
  check_blocks_match_whole<float>(true, 0.2f, 2e-5);
}

// bf16 storage: the kernels read the same bf16 inputs; the whole kernel rounds its output to
// bf16, so the tolerance is bf16's.
TEST(AttentionBlock, Bf16InputsGiveTheWholeAttention) {
  check_blocks_match_whole<bf16>(true, 0.1f, 1e-2);
}

// Each task owns its outputs and sums in a fixed order: the same bits for 1 and 2 threads. A
// query block at position 37 against a key block at 21 (neither a multiple of 4 nor of 64),
// longer than one tile, with dropout.
TEST(AttentionBlock, IndependentOfThreadCount) {
  const Shape s{2, 200, 4, 2, 16};
  const int64_t W = s.width(), O = int64_t{s.NH} * s.HD, q_len = 150, k_len = 90;
  const std::vector<float> qkv = testing::random_normal(s.qkv_size(), 7);
  const std::vector<float> dout = testing::random_normal(s.out_size(), 8);
  const std::vector<float> lse_in = testing::random_normal(s.lse_size(), 9, 0.1f);
  const std::vector<float> delta = testing::random_normal(s.lse_size(), 10, 0.1f);
  std::vector<float> lse(lse_in);
  for (float& x : lse) x += 6.0f;  // a plausible whole-attention log-sum-exp
  AttentionBlock a;
  a.B = s.B;
  a.q_len = q_len;
  a.k_len = k_len;
  a.q_pos = 37;
  a.k_pos = 21;
  a.seq = 400;
  a.NH = s.NH;
  a.KV = s.KV;
  a.HD = s.HD;
  a.q_sample = a.kv_sample = s.T * W;
  a.q_ld = a.kv_ld = W;
  a.o_sample = s.T * O;
  a.o_ld = O;
  a.lse_ld = s.T;
  AttentionDropout d;
  d.p = 0.1f;
  d.key = philox_key(2, RngPurpose::kAttentionDropout, 3);
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> o(s.out_size(), 0.0f), l(s.lse_size(), 0.0f), dq(s.out_size(), 0.0f),
        dkv(s.qkv_size(), 0.0f);
    const float* k = qkv.data() + s.NH * s.HD;
    const float* v = qkv.data() + (s.NH + s.KV) * s.HD;
    attention_block_forward(o.data(), l.data(), qkv.data(), k, v, a, d);
    attention_block_backward(dq.data(), dkv.data() + s.NH * s.HD, dkv.data() + (s.NH + s.KV) * s.HD,
                             dout.data(), qkv.data(), k, v, lse.data(), delta.data(), a, d);
    omp_set_num_threads(saved);
    std::vector<float> all = o;
    for (const auto* part : {&l, &dq, &dkv}) all.insert(all.end(), part->begin(), part->end());
    return all;
  };
  const std::vector<float> one = run(1), two = run(2);
  EXPECT_EQ(one, two);
  double sum = 0;
  for (float x : one) sum += std::fabs(x);
  EXPECT_GT(sum, 0.0);
}

}  // namespace
}  // namespace tessera::kernels
