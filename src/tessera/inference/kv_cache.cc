#include "tessera/inference/kv_cache.h"

#include "tessera/core/error.h"

namespace tessera::inference {

KvCache::KvCache(int layers, int64_t row_elements, DType dtype, int64_t block_size,
                 int64_t num_blocks)
    : layers_(layers),
      row_elements_(row_elements),
      block_size_(block_size),
      num_blocks_(num_blocks),
      storage_(Tensor::empty({layers, num_blocks, block_size, row_elements}, dtype,
                             MemoryCategory::kActivations)) {
  TESSERA_CHECK(layers > 0 && row_elements > 0 && block_size > 0 && num_blocks > 0);
  // Taken from the back: block 0 first, so a lone sequence's blocks are in address order.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

void* KvCache::block(int layer, int32_t block) const {
  TESSERA_CHECK(layer >= 0 && layer < layers_ && block >= 0 && block < num_blocks_);
  const int64_t offset = ((int64_t{layer} * num_blocks_ + block) * block_size_) * row_elements_;
  return static_cast<unsigned char*>(storage_.raw()) +
         offset * static_cast<int64_t>(dtype_size(storage_.dtype()));
}

bool KvCache::reserve(std::vector<int32_t>& table, int64_t tokens) {
  const int64_t need = blocks_for(tokens) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  if (need > free_blocks()) return false;
  for (int64_t i = 0; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvCache::release(std::vector<int32_t>& table) {
  for (int32_t b : table) free_.push_back(b);
  table.clear();
}

}  // namespace tessera::inference
