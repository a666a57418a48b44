// Token permutation for Mixture-of-Experts (Megatron-Core `moe_utils.permute`/`unpermute`):
// each token's k copies are laid out in expert-major order (expert 0's tokens first, each
// expert's in token order), so every expert runs one GEMM over a contiguous block of rows; the
// experts' outputs are then combined back per token, weighted by the router's weights. Each
// operation has its backward. fp32 rows of C features. Not wired into the model yet (issue
// "Mixture of Experts").
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/moe/router.h"

namespace tessera::moe {

// Where each (token, choice) goes: row_of[t * k + a] is the permuted row of token t's a-th
// expert; expert_begin[e] .. expert_begin[e + 1] are expert e's rows (E + 1 entries).
struct Permutation {
  int64_t tokens = 0;
  int topk = 0;
  std::vector<int64_t> row_of;        // (T * k)
  std::vector<int64_t> token_of_row;  // (T * k)
  std::vector<int64_t> expert_begin;  // (E + 1)
  int64_t rows() const { return static_cast<int64_t>(token_of_row.size()); }
};

Permutation make_permutation(const Routing& r, int num_experts);

// out (T*k, C): row_of[t*k + a] = x[t].
void permute(float* out, const float* x, const Permutation& p, int64_t C);
// dx (T, C) = sum over a of dout[row_of[t*k + a]] (overwritten).
void permute_backward(float* dx, const float* dout, const Permutation& p, int64_t C);

// y (T, C) = sum over a (in choice order) of weights[t*k + a] * rows[row_of[t*k + a]].
void unpermute(float* y, const float* rows, const float* weights, const Permutation& p,
               int64_t C);
// drows (T*k, C) = weights * dy[token] (overwritten); dweights (T*k) = dot(dy[t], rows[row])
// (overwritten), accumulated in double.
void unpermute_backward(float* drows, float* dweights, const float* dy, const float* rows,
                        const float* weights, const Permutation& p, int64_t C);

}  // namespace tessera::moe
