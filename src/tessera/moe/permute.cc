#include "tessera/moe/permute.h"

#include <algorithm>
#include <cstring>

namespace tessera::moe {

Permutation make_permutation(const Routing& r, int num_experts) {
  Permutation p;
  p.tokens = r.tokens;
  p.topk = r.topk;
  const int64_t n = r.tokens * r.topk;
  p.row_of.resize(n);
  p.token_of_row.resize(n);
  p.expert_begin.assign(num_experts + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++p.expert_begin[r.experts[i] + 1];
  for (int e = 0; e < num_experts; ++e) p.expert_begin[e + 1] += p.expert_begin[e];
  // A counting sort, stable in token order: each expert's rows keep the tokens' order.
  std::vector<int64_t> next(p.expert_begin.begin(), p.expert_begin.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = next[r.experts[i]]++;
    p.row_of[i] = row;
    p.token_of_row[row] = i / r.topk;
  }
  return p;
}

void permute(float* out, const float* x, const Permutation& p, int64_t C) {
#pragma omp parallel for schedule(static) if (p.rows() * C > (int64_t{1} << 16))
  for (int64_t row = 0; row < p.rows(); ++row)
    std::memcpy(out + row * C, x + p.token_of_row[row] * C, C * sizeof(float));
}

void permute_backward(float* dx, const float* dout, const Permutation& p, int64_t C) {
  const int k = p.topk;
#pragma omp parallel for schedule(static) if (p.rows() * C > (int64_t{1} << 16))
  for (int64_t t = 0; t < p.tokens; ++t) {
    float* d = dx + t * C;
    std::fill(d, d + C, 0.0f);
    for (int a = 0; a < k; ++a) {  // in choice order, so the sum is the same on every layout
      const float* src = dout + p.row_of[t * k + a] * C;
      for (int64_t c = 0; c < C; ++c) d[c] += src[c];
    }
  }
}

void unpermute(float* y, const float* rows, const float* weights, const Permutation& p,
               int64_t C) {
  const int k = p.topk;
#pragma omp parallel for schedule(static) if (p.rows() * C > (int64_t{1} << 16))
  for (int64_t t = 0; t < p.tokens; ++t) {
    float* out = y + t * C;
    std::fill(out, out + C, 0.0f);
    for (int a = 0; a < k; ++a) {
      const float w = weights[t * k + a];
      const float* src = rows + p.row_of[t * k + a] * C;
      for (int64_t c = 0; c < C; ++c) out[c] += w * src[c];
    }
  }
}

void unpermute_backward(float* drows, float* dweights, const float* dy, const float* rows,
                        const float* weights, const Permutation& p, int64_t C) {
  const int k = p.topk;
#pragma omp parallel for schedule(static) if (p.rows() * C > (int64_t{1} << 16))
  for (int64_t t = 0; t < p.tokens; ++t) {
    const float* g = dy + t * C;
    for (int a = 0; a < k; ++a) {
      const int64_t row = p.row_of[t * k + a];
      const float w = weights[t * k + a];
      float* d = drows + row * C;
      const float* r = rows + row * C;
      double dot = 0;
      for (int64_t c = 0; c < C; ++c) {
        d[c] = w * g[c];
        dot += static_cast<double>(g[c]) * r[c];
      }
      dweights[t * k + a] = static_cast<float>(dot);
    }
  }
}

}  // namespace tessera::moe
