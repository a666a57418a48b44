#include "tessera/inference/kv_cache.h"

#include "tessera/core/error.h"

namespace tessera::inference {

namespace {

// --kv-cache-dtype's names besides "auto", vLLM's and Tessera's.
struct KvDtypeName {
  const char* name;
  model::KvElement element;
};
constexpr KvDtypeName kKvDtypeNames[] = {
    {"fp32", model::KvElement::kF32},        {"float32", model::KvElement::kF32},
    {"bf16", model::KvElement::kBF16},       {"bfloat16", model::KvElement::kBF16},
    {"fp16", model::KvElement::kF16},        {"float16", model::KvElement::kF16},
    {"half", model::KvElement::kF16},        {"fp8", model::KvElement::kF8E4M3},
    {"fp8_e4m3", model::KvElement::kF8E4M3}, {"fp8_e5m2", model::KvElement::kF8E5M2},
};

}  // namespace

std::vector<std::string> kv_cache_dtype_names() {
  std::vector<std::string> names = {"auto"};
  for (const KvDtypeName& n : kKvDtypeNames) names.emplace_back(n.name);
  return names;
}

model::KvElement parse_kv_cache_dtype(const std::string& name, DType compute) {
  using model::KvElement;
  const KvElement same = compute == DType::kBF16  ? KvElement::kBF16
                         : compute == DType::kF16 ? KvElement::kF16
                                                  : KvElement::kF32;
  if (name == "auto") return same;
  for (const KvDtypeName& n : kKvDtypeNames) {
    if (name != n.name) continue;
    // A prompt chunk reads the cache as compute-dtype blocks, exact only when every cached
    // value is a compute-dtype value: bf16 holds values fp16 cannot (beyond 65504) and fp16
    // values bf16 cannot (11 significant bits).
    const bool other_16_bit = (n.element == KvElement::kBF16 && same == KvElement::kF16) ||
                              (n.element == KvElement::kF16 && same == KvElement::kBF16);
    if (other_16_bit)
      throw Error("--kv-cache-dtype " + name + " with " + dtype_name(compute) +
                  " compute: bf16 and fp16 do not hold each other's values (bf16 reaches beyond "
                  "fp16's 65504, fp16 keeps bits bf16 drops); use auto, fp32 or fp8");
    return n.element;
  }
  throw Error("--kv-cache-dtype: unknown value '" + name +
              "' (expected auto, fp32, bf16, fp16, fp8, fp8_e4m3 or fp8_e5m2)");
}

int64_t kv_element_bytes(model::KvElement element) {
  return model::visit_kv_element(element, [](auto tag) { return int64_t{sizeof(tag)}; });
}

KvCache::KvCache(int layers, int64_t row_elements, model::KvElement element, int64_t block_size,
                 int64_t num_blocks)
    : layers_(layers),
      row_elements_(row_elements),
      block_size_(block_size),
      num_blocks_(num_blocks),
      element_(element) {
  TESSERA_CHECK(layers > 0 && row_elements > 0 && row_elements % 2 == 0 && block_size > 0 &&
                num_blocks > 0);
  const int64_t bytes =
      int64_t{layers} * num_blocks * block_size * row_elements * kv_element_bytes(element);
  storage_ = Tensor::empty({bytes / 2}, DType::kU16, MemoryCategory::kActivations);
  // Taken from the back: block 0 first, so a lone sequence's blocks are in address order.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

void* KvCache::block(int layer, int32_t block) const {
  TESSERA_CHECK(layer >= 0 && layer < layers_ && block >= 0 && block < num_blocks_);
  const int64_t offset = ((int64_t{layer} * num_blocks_ + block) * block_size_) * row_elements_;
  return static_cast<unsigned char*>(storage_.raw()) + offset * kv_element_bytes(element_);
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
