// Merging attention over disjoint sets of keys: each part's normalised output and log-sum-exp
// (what kernels/attention_block.h's forward writes) combine into the softmax over the union of
// the keys. Context-parallel attention merges the key/value blocks of other ranks this way
// (context/block_attention.h), and cached decoding the blocks of a sequence's KV cache
// (model/kv_cache_view.h). Plain C++ (no per-target code): a few exps per row.
#pragma once

#include <cstdint>

namespace tessera::kernels {

// For query rows [row0, row0 + rows) of B samples of T rows: acc (B, T, NH * HD) and L
// (B, NH, T), the running output and log-sum-exp, take in a part's o and lse (same layouts):
//   L' = log(exp(L) + exp(lse)),  acc' = acc exp(L - L') + o exp(lse - L').
// A row whose part saw no key (lse -inf) is left as it was; a running L of -inf (no key yet)
// takes the part as it is. Threads: the calling thread's OpenMP team over (sample, head).
void attention_merge(float* acc, float* L, const float* o, const float* lse, int64_t B, int64_t T,
                     int NH, int HD, int64_t row0, int64_t rows);

}  // namespace tessera::kernels
