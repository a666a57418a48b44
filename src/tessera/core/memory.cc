#include "tessera/core/memory.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/page_pool.h"

namespace tessera {
namespace {

constexpr int kCategories = static_cast<int>(MemoryCategory::kCount);
std::atomic<int64_t> g_current[kCategories];
std::atomic<int64_t> g_peak[kCategories];
std::atomic<int64_t> g_total_current;
std::atomic<int64_t> g_total_peak;

void raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// The accountant's large blocks live in the page pool (page_pool.h), which keeps freed pages for
// reuse. What is left on the heap — small blocks, MPI's and the libraries' own — is kept there
// too: glibc would return large blocks to the kernel with munmap and fault them in again on the
// next allocation, which costs more than the code touching them.
//
// One arena for the whole process, set here before main() because it only binds threads that
// have not picked an arena yet (MPI_Init starts threads of its own). Open MPI allocates
// temporary buffers as large as the message inside reductions; on a thread with its own glibc
// arena (the communication thread) each such buffer is a fresh mmap, because non-main arenas
// cap their heaps at 64 MiB, and is page-faulted on every call: bench/comm measured 64-256 MiB
// all-reduce and reduce-scatter at 0.4x raw MPI that way, 0.98x with one arena. Our
// allocations are few and large, so arena contention does not matter. MALLOC_ARENA_MAX in the
// environment still wins.
struct MallocTuning {
  MallocTuning() {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 1);
  }
} g_malloc_tuning;

}  // namespace

const char* memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kParams: return "params";
    case MemoryCategory::kGrads: return "grads";
    case MemoryCategory::kOptimizer: return "optimizer";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kComm: return "comm";
    case MemoryCategory::kOther: return "other";
    case MemoryCategory::kCount: break;
  }
  return "?";
}

MemoryAccountant& MemoryAccountant::instance() {
  static MemoryAccountant accountant;
  return accountant;
}

void MemoryAccountant::on_alloc(MemoryCategory category, int64_t bytes) {
  const int c = static_cast<int>(category);
  raise_peak(g_peak[c], g_current[c].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  raise_peak(g_total_peak, g_total_current.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void MemoryAccountant::on_free(MemoryCategory category, int64_t bytes) {
  g_current[static_cast<int>(category)].fetch_sub(bytes, std::memory_order_relaxed);
  g_total_current.fetch_sub(bytes, std::memory_order_relaxed);
}

MemorySnapshot MemoryAccountant::snapshot() const {
  MemorySnapshot s{};
  for (int c = 0; c < kCategories; ++c) {
    s.current[c] = g_current[c].load(std::memory_order_relaxed);
    s.peak[c] = g_peak[c].load(std::memory_order_relaxed);
  }
  s.total_current = g_total_current.load(std::memory_order_relaxed);
  s.total_peak = g_total_peak.load(std::memory_order_relaxed);
  return s;
}

void MemoryAccountant::reset_peaks() {
  for (int c = 0; c < kCategories; ++c) g_peak[c].store(g_current[c].load());
  g_total_peak.store(g_total_current.load());
}

void* tracked_alloc(size_t bytes, MemoryCategory category) {
  if (bytes == 0) return nullptr;
  // Large blocks in whole pages of the pool (page_pool.h): the resident set then follows the
  // accountant's peak instead of the heap's placement.
  void* ptr = bytes >= kPooledBytes ? process_page_pool().acquire(bytes) : nullptr;
  if (ptr == nullptr) ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (ptr == nullptr) throw std::bad_alloc();
  MemoryAccountant::instance().on_alloc(category, static_cast<int64_t>(bytes));
  return ptr;
}

size_t page_bytes() {
  static const size_t bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

void release_pages(void* ptr, size_t bytes) {
  if (bytes == 0) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(ptr), end = begin + bytes;
  const uintptr_t first = (begin + page_bytes() - 1) / page_bytes() * page_bytes();
  const uintptr_t last = end / page_bytes() * page_bytes();
  if (first >= last) {  // no whole page inside
    std::memset(ptr, 0, bytes);
    return;
  }
  std::memset(ptr, 0, first - begin);
  std::memset(reinterpret_cast<void*>(last), 0, end - last);
  if (madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0)
    std::memset(reinterpret_cast<void*>(first), 0, last - first);  // still zero, just resident
}

void prefer_huge_pages(void* ptr, size_t bytes) {
#ifdef MADV_HUGEPAGE
  const uintptr_t begin = reinterpret_cast<uintptr_t>(ptr), end = begin + bytes;
  const uintptr_t first = (begin + page_bytes() - 1) / page_bytes() * page_bytes();
  const uintptr_t last = end / page_bytes() * page_bytes();
  if (first < last) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)ptr;
  (void)bytes;
#endif
}

int64_t resident_bytes(const void* ptr, size_t bytes) {
  if (bytes == 0) return 0;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(ptr), end = begin + bytes;
  const uintptr_t first = begin / page_bytes() * page_bytes();
  const size_t pages = (end - first + page_bytes() - 1) / page_bytes();
  std::vector<unsigned char> in_core(pages);
  if (mincore(reinterpret_cast<void*>(first), end - first, in_core.data()) != 0) return -1;
  int64_t total = 0;
  for (size_t i = 0; i < pages; ++i) {
    if (!(in_core[i] & 1)) continue;
    const uintptr_t p0 = std::max(begin, first + i * page_bytes());
    const uintptr_t p1 = std::min(end, first + (i + 1) * page_bytes());
    total += static_cast<int64_t>(p1 - p0);
  }
  return total;
}

void tracked_free(void* ptr, size_t bytes, MemoryCategory category) {
  if (ptr == nullptr) return;
  if (bytes < kPooledBytes || !process_page_pool().release(ptr)) std::free(ptr);
  MemoryAccountant::instance().on_free(category, static_cast<int64_t>(bytes));
}

int64_t process_resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<int64_t>(page_bytes()) : 0;
}

int64_t process_baseline_bytes() {
  const int64_t resident = process_resident_bytes();
  if (resident == 0) return 0;
  const PoolStats pool = process_page_pool().stats();
  const struct mallinfo2 heap = mallinfo2();
  // The accountant's blocks on the heap: its total less the pool's (those are whole pages, so
  // this undercounts by at most a page a pooled block).
  const int64_t on_heap =
      std::max<int64_t>(0, MemoryAccountant::instance().snapshot().total_current - pool.live_bytes);
  return std::max<int64_t>(0, resident - pool.live_bytes - pool.free_bytes -
                                  static_cast<int64_t>(heap.fordblks) - on_heap);
}

double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  double bytes = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
  // A limit file holds a byte count, or "max" (v2) / a value near 2^63 (v1) for none.
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::FILE* f = std::fopen(path, "r");
    if (f == nullptr) continue;
    unsigned long long limit = 0;
    if (std::fscanf(f, "%llu", &limit) == 1 && limit > 0 &&
        (bytes == 0 || static_cast<double>(limit) < bytes))
      bytes = static_cast<double>(limit);
    std::fclose(f);
  }
  return bytes;
}

}  // namespace tessera
