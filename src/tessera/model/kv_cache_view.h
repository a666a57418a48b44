// What a cached (inference) forward sees of a KV cache: blocks of `block_size()` token rows, per
// layer, each row one token's keys and values after RoPE, [k (KV HD) | v (KV HD)] in the model's
// compute dtype (KV this rank's key/value groups), and for each sequence of the forward its
// block table. The cache itself (a pool shared by sequences of different lengths, allocation,
// eviction) is inference/kv_cache.h's; the model only reads and appends rows through this view,
// so model/ does not depend on inference/.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::model {

class KvBlocks {
 public:
  virtual ~KvBlocks() = default;
  virtual int64_t block_size() const = 0;
  // The first row of block `block` of global layer `layer`; rows are row_elements() apart.
  virtual void* block(int layer, int32_t block) const = 0;
  // Elements of one token row: 2 KV HD.
  virtual int64_t row_elements() const = 0;
};

// One sequence of a cached forward: its `rows` new tokens are consecutive rows of the forward's
// input (sequences in the order given), at positions past, past + 1, ...; `blocks` covers at
// least past + rows tokens. The forward writes the new tokens' rows into the blocks and attends
// to all past + rows of them (causally).
struct CachedSequence {
  int64_t rows = 0;
  int64_t past = 0;
  const std::vector<int32_t>* blocks = nullptr;
};

}  // namespace tessera::model
