// What a cached (inference) forward sees of a KV cache: blocks of `block_size()` token rows, per
// layer, each row one token's keys and values after RoPE, [k (KV HD) | v (KV HD)] in the cache's
// element type (KV this rank's key/value groups), and for each sequence of the forward its
// block table. The element type is the model's compute dtype or another one chosen for the cache
// (inference's --kv-cache-dtype): keys and values are rounded to it once, when their row is
// written, and widened back to fp32 exactly when read. The cache itself (a pool shared by sequences
// of different lengths, allocation, eviction) is inference/kv_cache.h's; the model only reads and
// appends rows through this view, so model/ does not depend on inference/.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/fp8.h"

namespace tessera::model {

// A KV cache's element type.
enum class KvElement { kF32, kBF16, kF16, kF8E4M3, kF8E5M2 };

// Calls f(T{}) with T the element type's storage type (float, bf16, fp16, fp8_e4m3, fp8_e5m2).
template <typename F>
decltype(auto) visit_kv_element(KvElement e, F&& f) {
  switch (e) {
    case KvElement::kF32:
      return f(float{});
    case KvElement::kBF16:
      return f(bf16{});
    case KvElement::kF16:
      return f(fp16{});
    case KvElement::kF8E4M3:
      return f(fp8_e4m3{});
    case KvElement::kF8E5M2:
      return f(fp8_e5m2{});
  }
  throw std::logic_error("unknown KV cache element type");
}

class KvBlocks {
 public:
  virtual ~KvBlocks() = default;
  virtual int64_t block_size() const = 0;
  virtual KvElement element() const = 0;
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
