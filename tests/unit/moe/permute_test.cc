// MoE token permutation: expert-major layout, and permute -> unpermute = x * sum of weights.
#include "tessera/moe/permute.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace tessera::moe {
namespace {

// T tokens, E experts, k choices, from random logits.
struct Case {
  int64_t T = 7, C = 5;
  int E = 4, k = 2;
  std::vector<float> x, logits;
  Routing r;
  Permutation p;
  Case() {
    std::mt19937 gen(3);
    std::normal_distribution<float> n(0.0f, 1.0f);
    x.resize(T * C);
    logits.resize(T * E);
    for (float& v : x) v = n(gen);
    for (float& v : logits) v = n(gen);
    r = route(logits.data(), T, RouterConfig{E, k});
    p = make_permutation(r, E);
  }
};

TEST(MoePermute, ExpertMajorAndStableInTokenOrder) {
  const Case c;
  ASSERT_EQ(c.p.rows(), c.T * c.k);
  EXPECT_EQ(c.p.expert_begin.back(), c.T * c.k);
  for (int e = 0; e < c.E; ++e) {
    EXPECT_EQ(c.p.expert_begin[e + 1] - c.p.expert_begin[e], c.r.expert_count[e]);
    for (int64_t row = c.p.expert_begin[e] + 1; row < c.p.expert_begin[e + 1]; ++row)
      EXPECT_LT(c.p.token_of_row[row - 1], c.p.token_of_row[row]);
  }
  for (int64_t i = 0; i < c.T * c.k; ++i) {
    const int64_t row = c.p.row_of[i];
    EXPECT_EQ(c.p.token_of_row[row], i / c.k);
    EXPECT_GE(row, c.p.expert_begin[c.r.experts[i]]);
    EXPECT_LT(row, c.p.expert_begin[c.r.experts[i] + 1]);
  }
}

TEST(MoePermute, RoundTripIsXTimesTheSumOfWeights) {
  const Case c;
  std::vector<float> rows(c.p.rows() * c.C), y(c.T * c.C);
  permute(rows.data(), c.x.data(), c.p, c.C);
  unpermute(y.data(), rows.data(), c.r.weights.data(), c.p, c.C);
  for (int64_t t = 0; t < c.T; ++t) {
    for (int64_t j = 0; j < c.C; ++j) {
      // Bitwise: the same float products summed in choice order.
      float want = 0.0f;
      for (int a = 0; a < c.k; ++a) want += c.r.weights[t * c.k + a] * c.x[t * c.C + j];
      EXPECT_EQ(y[t * c.C + j], want);
      // The softmax weights sum to 1 (topk_scaling 1).
      EXPECT_NEAR(y[t * c.C + j], c.x[t * c.C + j], 1e-6 * (1 + std::fabs(c.x[t * c.C + j])));
    }
  }
}

TEST(MoePermute, BackwardsAreTheAdjoints) {
  // <permute(x), u> = <x, permute_backward(u)> and the unpermute backward against its forward:
  // y is linear in rows and in weights.
  const Case c;
  std::mt19937 gen(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> u(c.p.rows() * c.C), dy(c.T * c.C);
  for (float& v : u) v = n(gen);
  for (float& v : dy) v = n(gen);
  std::vector<float> px(c.p.rows() * c.C), dx(c.T * c.C);
  permute(px.data(), c.x.data(), c.p, c.C);
  permute_backward(dx.data(), u.data(), c.p, c.C);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < u.size(); ++i) lhs += double(px[i]) * u[i];
  for (size_t i = 0; i < dx.size(); ++i) rhs += double(c.x[i]) * dx[i];
  EXPECT_NEAR(lhs, rhs, 1e-4);

  std::vector<float> y(c.T * c.C), drows(c.p.rows() * c.C), dw(c.T * c.k);
  unpermute(y.data(), u.data(), c.r.weights.data(), c.p, c.C);
  unpermute_backward(drows.data(), dw.data(), dy.data(), u.data(), c.r.weights.data(), c.p, c.C);
  double ydy = 0, rows_term = 0, w_term = 0;
  for (size_t i = 0; i < y.size(); ++i) ydy += double(y[i]) * dy[i];
  for (size_t i = 0; i < u.size(); ++i) rows_term += double(u[i]) * drows[i];
  for (size_t i = 0; i < dw.size(); ++i) w_term += double(c.r.weights[i]) * dw[i];
  // <y, dy> = <rows, drows> = <weights, dweights> (bilinear in rows and weights).
  EXPECT_NEAR(rows_term, ydy, 1e-4);
  EXPECT_NEAR(w_term, ydy, 1e-4);
}

// keep_tokens over a partition of the tokens (three parts, padding with part 0, a capacity that
// drops): each part's rows are the whole permutation's rows of its tokens, so the parts'
// unpermuted outputs sum to the whole one bitwise, each token's from exactly one part.
TEST(MoePermute, KeepTokensPartitionsTheRows) {
  Case c;
  const Permutation whole =
      make_permutation(c.r, c.E, CapacityOptions{3, DropPolicy::kProbs, true});
  ASSERT_GT(whole.dropped, 0);
  std::vector<float> rows(whole.rows() * c.C), y(c.T * c.C), sum(c.T * c.C, 0.0f);
  permute(rows.data(), c.x.data(), whole, c.C);
  unpermute(y.data(), rows.data(), c.r.weights.data(), whole, c.C);
  int64_t rows_seen = 0;
  for (int part = 0; part < 3; ++part) {
    std::vector<char> keep(c.T);
    for (int64_t t = 0; t < c.T; ++t) keep[t] = t % 3 == part;
    const Permutation mine = keep_tokens(whole, keep, part == 0);
    EXPECT_EQ(mine.dropped, 0);
    ASSERT_EQ(mine.expert_begin.size(), whole.expert_begin.size());
    for (int64_t row = 0; row < mine.rows(); ++row) {
      const int64_t t = mine.token_of_row[row];
      EXPECT_TRUE(t < 0 ? part == 0 : keep[t] != 0);
    }
    for (size_t i = 0; i < whole.row_of.size(); ++i) {
      const bool mine_token = keep[i / c.k] != 0;
      EXPECT_EQ(mine.row_of[i] >= 0, mine_token && whole.row_of[i] >= 0) << i;
    }
    rows_seen += mine.rows();
    std::vector<float> part_rows(mine.rows() * c.C), part_y(c.T * c.C);
    permute(part_rows.data(), c.x.data(), mine, c.C);
    unpermute(part_y.data(), part_rows.data(), c.r.weights.data(), mine, c.C);
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t j = 0; j < c.C; ++j) {
        if (!keep[t]) {
          EXPECT_EQ(part_y[t * c.C + j], 0.0f);
        }
        sum[t * c.C + j] += part_y[t * c.C + j];
      }
  }
  EXPECT_EQ(rows_seen, whole.rows());
  for (int64_t i = 0; i < c.T * c.C; ++i) EXPECT_EQ(sum[i], y[i]) << i;
}

}  // namespace
}  // namespace tessera::moe
