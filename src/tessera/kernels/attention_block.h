// One block of queries against one block of keys of a causal self-attention: the pieces
// context-parallel attention is assembled from (context/block_attention.h). The queries are
// q_len consecutive positions of a longer sequence starting at q_pos, the keys k_len starting at
// k_pos; query p sees key p' iff p' <= p (and p' >= its document start). Scores, softmax,
// dropout (keyed by the whole sequence's coordinates, as AttentionDropout says: the masks of
// attention.h) and the arithmetic are those of attention.h, so blocks merged by their
// log-sum-exp give the whole attention up to the order of sums.
//
// Forward writes the block's own normalised output and log-sum-exp (a query that sees no key
// of the block: output 0, lse -inf). Backward takes the whole attention's lse and
// delta = rowsum(dO * O) and adds the block's share of dQ, dK and dV (fp32). Threads: the
// calling thread's OpenMP team, forward over (sample, head, query blocks), backward over
// (sample, key/value group); every sum has a fixed order, so results do not depend on the
// thread count. Scratch per thread (fp32, HD rounded up to 16): forward 2 k_len * HD (the
// head's keys and values) plus a few 64-row tiles, backward 5 q_len * HD plus tiles.
#pragma once

#include <cstdint>

#include "tessera/kernels/attention.h"
#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

// Where a block's operands are. Element strides; heads at h * HD, key/value groups at g * HD.
struct AttentionBlock {
  int64_t B = 0;                     // samples
  int64_t q_len = 0, k_len = 0;      // query and key rows per sample
  int64_t q_pos = 0, k_pos = 0;      // positions of the first query and key in the sequence
  int64_t seq = 0;                   // whole sequence length (the dropout row coordinate)
  int NH = 0, KV = 0, HD = 0;        // query heads (NH % KV == 0), key/value groups, head dim
  int64_t q_sample = 0, q_ld = 0;    // q: row r of sample b at b * q_sample + r * q_ld
  int64_t o_sample = 0, o_ld = 0;    // o, dout, dq: likewise
  int64_t kv_sample = 0, kv_ld = 0;  // k, v, dk, dv: likewise
  int64_t lse_ld = 0;                // lse, delta: (b, h) row r at (b * NH + h) * lse_ld + r
  // Per query row r of sample b: the first key position it may see (b * doc_sample + r), or
  // nullptr (plain causal).
  const int32_t* doc_start = nullptr;
  int64_t doc_sample = 0;
};

// o (fp32), lse: the block's softmax(q k^T / sqrt(HD)) v with dropout, and its log-sum-exp.
template <typename Float>
void attention_block_forward(float* o, float* lse, const Float* q, const Float* k, const Float* v,
                             const AttentionBlock& blk, const AttentionDropout& dropout) {
  dispatch<&attention_block_forward<Float>>(o, lse, q, k, v, blk, dropout);
}

// dq, dk, dv (fp32) += the block's share of the gradients, from dout, the whole attention's lse
// and delta (rowsum(dout * out)), recomputing the block's probabilities.
template <typename Float>
void attention_block_backward(float* dq, float* dk, float* dv, const Float* dout, const Float* q,
                              const Float* k, const Float* v, const float* lse, const float* delta,
                              const AttentionBlock& blk, const AttentionDropout& dropout) {
  dispatch<&attention_block_backward<Float>>(dq, dk, dv, dout, q, k, v, lse, delta, blk, dropout);
}

}  // namespace tessera::kernels
