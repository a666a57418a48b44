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

// Raw aligned allocation through the accountant (64-byte aligned, for AVX-512 loads); blocks of
// kPooledBytes or more in the page pool (page_pool.h). tracked_free takes the size and category
// tracked_alloc was given: the size says where the block lives.
void* tracked_alloc(size_t bytes, MemoryCategory category);
void tracked_free(void* ptr, size_t bytes, MemoryCategory category);

// A std::allocator through tracked_alloc, for buffers that should live where tensors do (the
// page pool for large ones) and count in the accountant.
template <typename T, MemoryCategory kCategory = MemoryCategory::kOther>
struct TrackedAllocator {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = TrackedAllocator<U, kCategory>;
  };
  TrackedAllocator() = default;
  template <typename U>
  TrackedAllocator(const TrackedAllocator<U, kCategory>&) {}
  T* allocate(size_t n) { return static_cast<T*>(tracked_alloc(n * sizeof(T), kCategory)); }
  void deallocate(T* p, size_t n) { tracked_free(p, n * sizeof(T), kCategory); }
  template <typename U>
  bool operator==(const TrackedAllocator<U, kCategory>&) const {
    return true;
  }
};

// Gives the physical pages of [ptr, ptr + bytes) back to the OS and leaves the range reading as
// zeros (memset for the partial pages at either end, MADV_DONTNEED for the whole pages between);
// the memory stays allocated and is faulted back in, zero-filled, when written. For scratch
// regions of big long-lived buffers (ZeRO's unowned gradient slices between uses).
void release_pages(void* ptr, size_t bytes);
// Asks for transparent huge pages (2 MiB on x86-64) behind the whole pages of [ptr, ptr + bytes)
// (madvise MADV_HUGEPAGE; nothing where the kernel has none). For big buffers whose pages are
// given back (release_pages) and faulted in again every iteration: a read before the first write
// maps the zero page, and the write's copy-on-write then flushes the other threads' TLBs, an
// interprocessor interrupt per page, which in a virtual machine cost the 0.37 B model's backward
// 5 s instead of 0.3 (one per 2 MiB page instead of per 4 KiB one). The price: a huge page
// partly given back may stay whole until the kernel splits it, and khugepaged may fold a
// mostly-released 2 MiB region back in as zeros, so resident_bytes() of such a buffer can read
// above the pages in use.
void prefer_huge_pages(void* ptr, size_t bytes);
// Bytes of [ptr, ptr + bytes) backed by physical memory right now (mincore), counted in whole
// pages clipped to the range: the honest figure for buffers whose pages come and go.
int64_t resident_bytes(const void* ptr, size_t bytes);
// The system's page size in bytes (sysconf, read once).
size_t page_bytes();
// The whole process's resident set in bytes (Linux /proc/self/statm), 0 where unreadable.
int64_t process_resident_bytes();
// What a process holds beside the accountant's blocks, in bytes (0 where unreadable): its
// resident set less the pages of the page pool (core/page_pool.h), the heap's free chunks (glibc
// keeps them, above) and the accountant's blocks on the heap. What is left is the binary's and
// libraries' pages, and the memory of MPI, the runtime's threads and JIT-compiled kernels. Pool
// pages given back (release_pages) are counted as resident, so read it where the pool's pages are
// all touched (tessera-plan --calibrate does, after its kernels). Needs glibc 2.33 (mallinfo2).
int64_t process_baseline_bytes();
// The memory this host gives the process, in bytes: its physical memory, or the control group's
// limit where that is lower (cgroup v2 memory.max, v1 memory.limit_in_bytes: a container's, a
// SLURM job's). 0 when it cannot be told.
double host_memory_bytes();

}  // namespace tessera
