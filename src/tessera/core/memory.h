// Memory accounting. Every tensor allocation is tagged with a MemoryCategory; the accountant
// keeps the current and peak bytes per category and in total. Benchmarks and the trainer's
// `peak_mem_bytes` read it. Thread-safe (relaxed atomics; peaks are exact per category).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

enum class MemoryCategory { kParams, kGrads, kOptimizer, kActivations, kComm, kOther, kCount };

const char* memory_category_name(MemoryCategory category);

struct MemorySnapshot {
  int64_t current[static_cast<int>(MemoryCategory::kCount)];
  int64_t peak[static_cast<int>(MemoryCategory::kCount)];
  int64_t total_current;
  int64_t total_peak;
};

class MemoryAccountant {
 public:
  static MemoryAccountant& instance();
  void on_alloc(MemoryCategory category, int64_t bytes);
  void on_free(MemoryCategory category, int64_t bytes);
  MemorySnapshot snapshot() const;
  // Sets every peak to the current value (e.g. to measure one phase).
  void reset_peaks();
};

// Raw aligned allocation through the accountant (64-byte aligned, for AVX-512 loads).
void* tracked_alloc(size_t bytes, MemoryCategory category);
void tracked_free(void* ptr, size_t bytes, MemoryCategory category);

}  // namespace tessera
