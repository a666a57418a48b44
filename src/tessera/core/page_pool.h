// The pages behind the memory accountant's large blocks, kept so that the process's resident set
// follows the accountant's peak.
//
// Why: activations are allocated and freed every micro-batch in a changing mix of sizes. A heap
// (glibc's) keeps freed memory for reuse, which saves the page faults of fresh memory, but a freed
// block too small for the next request stays resident beside the new one, so the heap's
// high-water climbs above the largest total ever live, by an amount that depends on the order of
// allocations (and so on the communication thread's timing): measured 5-80 MiB above the
// accountant's peak (docs/planning.md, "The resident set"). tessera-plan predicts the accountant's
// peak; the resident set can only be predicted if it is that peak plus what the process holds
// beside its blocks.
//
// How: every block of kPooledBytes or more is whole pages of anonymous memory. A freed block's
// pages stay mapped in the pool (no fault when reused). A request is served from one free run of
// pages when one is long enough (its front is taken, nothing moves); otherwise free runs are
// moved into one new contiguous range with mremap, which moves the page-table entries and not the
// data (microseconds; no copy, no fault, no zeroing), and only what the pool lacks is fresh
// memory. So the pool never holds more pages than were ever live at once: its resident pages are
// the high-water of the live blocks, rounded to pages, whatever the order of allocation.
//
// mremap may not move a range that spans two kernel mappings (before Linux 6.17), so the pool
// keeps each run as the pieces it was made of (each inside one mapping) and moves them one by one.
// Pieces only split, so their count is bounded by dropping every free run (munmap) once it passes
// `max_pieces` (16384 by default), far below the kernel's 65530 mappings a process; past it even
// then (that many live blocks), a request the free runs cannot hold goes to the heap. A failed
// mremap (out of mappings, or a piece that a madvise on part of its block has split across two
// mappings, before 6.17; some kernels unmap the destination before they fail) unmaps the piece
// and maps the rest of the block afresh. All of these cost faults or placement, never
// correctness.
//
// Thread-safe (one mutex). In a training step's steady state nothing moves: the same sizes come
// back in the same order and find their runs (gpt2-124m, 2 micro-batches: 61 pieces moved in the
// first iteration, 2 in the next four).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

// Blocks of at least this many bytes (four pages) come from the pool; smaller ones from the heap.
// Not larger: at 256 KiB the accountant's small blocks (norm statistics, biases, ...) left 4.3 MiB
// of free chunks resident in the heap of a one-rank gpt2-tiny run (hidden 256), at 16 KiB 0.4.
constexpr size_t kPooledBytes = size_t{16} << 10;

// What a pool holds, for tests and diagnostics.
struct PoolStats {
  int64_t live_bytes = 0;  // in blocks handed out (whole pages)
  int64_t free_bytes = 0;  // kept for reuse
  int64_t pieces = 0;      // kernel mappings the pool's blocks and runs are made of, at most
  int64_t moves = 0;       // pieces moved by mremap so far
  int64_t dropped = 0;     // times every free run was unmapped to bound the pieces
};

class PagePool {
 public:
  // Moves `bytes` of pages from `from` to `to` (replacing what is mapped there), returning `to`,
  // or MAP_FAILED: mremap (move_pages), or for tests one that fails as older kernels do.
  using Mover = void* (*)(void* from, size_t bytes, void* to);
  static void* move_pages(void* from, size_t bytes, void* to);

  // `max_pieces`: the count of pieces past which every free run is unmapped (a test sets it low).
  explicit PagePool(int64_t max_pieces = 16384, Mover move = &move_pages);
  ~PagePool();  // unmaps every page, live or free
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  // Whole pages for `bytes` (> 0), page-aligned, or nullptr where no pages can be mapped or the
  // pool holds more than `max_pieces` mappings already (the caller falls back to the heap).
  void* acquire(size_t bytes);
  // Gives a block back to the pool; false if `ptr` is not a live block of this pool.
  bool release(void* ptr);
  PoolStats stats() const;

 private:
  struct State;
  State* state_;
};

// The process's pool, behind tracked_alloc (core/memory.h); never destroyed, since blocks may be
// freed by static destructors after main returns.
PagePool& process_page_pool();

}  // namespace tessera
