// The KV cache of an inference engine: one pool of blocks shared by every running sequence
// (vLLM's paged layout, Kwon et al. 2023), so sequences of different lengths take what they
// use. A block holds `block_size` tokens of every layer: per layer, block_size rows of one
// token's keys and values after RoPE ([k (KV HD) | v (KV HD)], KV this rank's key/value groups)
// in the cache's element type: the model's compute dtype, or what --kv-cache-dtype chose (fp8
// halves a bf16 cache; model/kv_cache_view.h). A sequence owns a block table (block ids in
// position order); blocks go back to the pool when it finishes. Not thread-safe: the engine's one
// thread uses it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/model/kv_cache_view.h"

namespace tessera::inference {

// --kv-cache-dtype, vLLM's names and Tessera's: "auto" (the compute dtype), "fp32"/"float32",
// "bf16"/"bfloat16", "fp16"/"float16"/"half", "fp8"/"fp8_e4m3" (vLLM's fp8 is e4m3),
// "fp8_e5m2". tessera::Error naming the accepted values for anything else, and for a 16-bit
// cache of the other 16-bit type than the compute dtype (their values do not fit each other).
model::KvElement parse_kv_cache_dtype(const std::string& name, DType compute);
// Every name parse_kv_cache_dtype accepts, "auto" first (for the flag's check).
std::vector<std::string> kv_cache_dtype_names();
int64_t kv_element_bytes(model::KvElement element);

class KvCache : public model::KvBlocks {
 public:
  // num_blocks blocks of block_size tokens for `layers` layers of rows of `row_elements`
  // elements of `element`: layers * num_blocks * block_size * row_elements elements, allocated
  // here (MemoryCategory::kActivations: what serving holds besides the weights).
  KvCache(int layers, int64_t row_elements, model::KvElement element, int64_t block_size,
          int64_t num_blocks);

  int64_t block_size() const override { return block_size_; }
  model::KvElement element() const override { return element_; }
  void* block(int layer, int32_t block) const override;
  int64_t row_elements() const override { return row_elements_; }

  // Grows `table` to cover `tokens` tokens. False (and `table` unchanged) when the pool lacks
  // the blocks.
  bool reserve(std::vector<int32_t>& table, int64_t tokens);
  // Gives a table's blocks back to the pool and empties it.
  void release(std::vector<int32_t>& table);
  // Blocks a sequence of `tokens` tokens needs.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t bytes() const { return storage_.nbytes(); }

 private:
  int layers_;
  int64_t row_elements_, block_size_, num_blocks_;
  model::KvElement element_;
  // (layers, num_blocks, block_size, row_elements) elements, held as bytes (16-bit words: the
  // tensor types have no 8-bit float; row_elements is even, so the count is whole).
  mutable Tensor storage_;
  std::vector<int32_t> free_;  // free block ids, the next one taken from the back
};

}  // namespace tessera::inference
