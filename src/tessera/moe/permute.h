// Token permutation for Mixture-of-Experts (Megatron-Core `moe_utils.permute`/`unpermute`):
// each token's k copies are laid out in expert-major order (expert 0's tokens first, each
// expert's in token order), so every expert runs one GEMM over a contiguous block of rows; the
// experts' outputs are then combined back per token, weighted by the router's weights. Each
// operation has its backward. Rows are fp32, bf16 or fp16 (C features); sums are taken in fp32
// in choice order and rounded once, so the result does not depend on the layout.
//
// Capacity (Megatron's --moe-expert-capacity-factor): an expert keeps at most `capacity` of the
// choices routed to it, the rest are dropped (row_of = -1: the token's output lacks that
// expert's term and its weight gets no gradient). With padding every expert owns exactly
// `capacity` rows, the unused ones zero (token_of_row = -1) and never read back.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/moe/router.h"

namespace tessera::moe {

// How expert parallelism moves rows between ranks (moe/token_dispatcher.h).
enum class DispatcherType { kAllToAll, kAllGather };

enum class DropPolicy {
  kProbs,     // keep the choices with the largest weights (ties: lower token first)
  kPosition,  // keep the first choices in token order
};

struct CapacityOptions {
  int64_t capacity = 0;  // rows kept per expert; 0: dropless (no limit)
  DropPolicy policy = DropPolicy::kProbs;
  bool pad = false;  // every expert gets exactly `capacity` rows
};

// The capacity of ceil(T * k / E * factor) rows per expert (Megatron's get_capacity).
int64_t expert_capacity(int64_t tokens, int topk, int num_experts, double factor);

// Where each (token, choice) goes: row_of[t * k + a] is the permuted row of token t's a-th
// expert (-1: dropped); expert_begin[e] .. expert_begin[e + 1] are expert e's rows (E + 1
// entries); token_of_row[row] the token a row copies (-1: padding).
struct Permutation {
  int64_t tokens = 0;
  int topk = 0;
  std::vector<int64_t> row_of;        // (T * k)
  std::vector<int64_t> token_of_row;  // (rows)
  std::vector<int64_t> expert_begin;  // (E + 1)
  int64_t dropped = 0;                // choices dropped by the capacity
  int64_t rows() const { return static_cast<int64_t>(token_of_row.size()); }
};

Permutation make_permutation(const Routing& r, int num_experts, const CapacityOptions& cap = {});

// The rows of `p` whose token has keep[token] != 0 (and the padding rows when keep_padding), in
// p's order, numbered afresh: the same tokens and experts, a kept choice's new row in row_of,
// -1 for the others (as if dropped: unpermute gives a token without rows a zero output, and
// its weights no gradient). `dropped` is 0 (p's count stays p's). Over a partition of the tokens
// (padding kept by one part) the parts' rows are p's rows, each once: how ranks that all hold
// the same routed micro-batch share its rows (expert tensor parallelism 1 under TP, in
// model/moe_layer.h).
Permutation keep_tokens(const Permutation& p, const std::vector<char>& keep, bool keep_padding);

// T: float, bf16 or fp16 (the row storage type); weights are fp32.
// out (rows, C): out[row] = x[token_of_row[row]] (zero for padding).
template <typename T>
void permute(T* out, const T* x, const Permutation& p, int64_t C);
// dx (T, C) = sum over kept choices a of dout[row_of[t*k + a]] (overwritten).
template <typename T>
void permute_backward(T* dx, const T* dout, const Permutation& p, int64_t C);
// The same sum in fp32, without rounding (for a caller adding more terms before it rounds).
template <typename T>
void permute_backward_f32(float* dx, const T* dout, const Permutation& p, int64_t C);

// y (T, C) = sum over kept choices a (in choice order) of weights[t*k + a] * rows[row_of[..]].
template <typename T>
void unpermute(T* y, const T* rows, const float* weights, const Permutation& p, int64_t C);
// drows (rows, C) = weights * dy[token] (zero for padding; overwritten); dweights (T*k) =
// dot(dy[t], rows[row]) accumulated in double (in a fixed order that depends on C only), 0 for
// dropped choices (overwritten).
template <typename T>
void unpermute_backward(T* drows, float* dweights, const T* dy, const T* rows,
                        const float* weights, const Permutation& p, int64_t C);

}  // namespace tessera::moe
