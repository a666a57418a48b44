// Attention of one sequence's few new queries against every key of its paged KV cache: the
// attention of a decode step (model::Attention::forward_cached).
//
// The cache holds a sequence's keys and values in blocks of block_size token rows at scattered
// addresses (model/kv_cache_view.h). The block kernel (attention_block.h) takes one block per
// call and its results are merged by log-sum-exp, so a decode step made one parallel call and
// one merge per block per layer; this kernel walks the block table itself, in one call.
//
// Arithmetic (as attention.h, fp32 whatever T is): the query row times 1/sqrt(HD), its dot
// product with each key it sees (16 fp32 lanes over HD, then summed), the softmax of those
// scores (max subtracted, the vectorised exp of fast_exp.h, the sum in fp32), the
// probability-weighted sum of the values in key order, divided by the softmax's sum and rounded
// once to T. No dropout (inference). The order of sums differs from the tiled kernels', so
// results agree with them to rounding.
//
// Meant for a few query rows: each (head, query) is one task over all its keys, without the
// tiling that makes the block kernel fast for a prompt. Threads: the calling thread's OpenMP
// team over (head, query) when the work is large enough; each output is computed by one thread
// in a fixed order, so results do not depend on the thread count. Scratch: one per-thread
// buffer of (keys + 2 HD) floats, kept between calls (scratch.h).
#pragma once

#include <cstdint>

#include "tessera/core/fp8.h"
#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

// Where the queries, the cache and the output are. Element strides; heads at h * HD, key/value
// groups at g * HD within a row.
struct DecodeAttention {
  int64_t rows = 0;            // new queries, at positions past, past + 1, ..., past + rows - 1
  int64_t past = 0;            // cached keys before the first new query's own
  int64_t block_size = 0;      // token rows per cache block
  int64_t q_ld = 0;            // q: row r at r * q_ld
  int64_t o_ld = 0;            // out: row r at r * o_ld
  int64_t kv_ld = 0;           // a block's token rows: key row t at t * kv_ld
  int64_t v_offset = 0;        // a token's values at its key row + v_offset
  int NH = 0, KV = 0, HD = 0;  // query heads (NH % KV == 0), key/value groups, head dim
  int64_t window = 0;          // 0: query p sees keys [0, p]; else Mistral's (p - window, p]
};

// out (rows, NH HD at o_ld) = softmax(q k^T / sqrt(HD)) v for each head, causally: query row r
// sees the keys of positions up to past + r (within the window). blocks[i] is the cache block
// holding positions [i block_size, (i + 1) block_size): its keys and values must already hold
// every position up to past + rows - 1 (the new tokens' own included). out must not overlap q
// or the cache. Bad geometry is a bug (aborts).
//
// The cache's element type TC may differ from the queries' T: fp32, bf16, fp16 or an 8-bit float
// (core/fp8.h), each widened to fp32 exactly as it is read (inference's --kv-cache-dtype).
template <typename T, typename TC>
void attention_decode_forward(T* out, const T* q, const TC* const* blocks,
                              const DecodeAttention& a) {
  dispatch<&attention_decode_forward<T, TC>>(out, q, blocks, a);
}

}  // namespace tessera::kernels
