// PagePool (core/page_pool.h): its pages are the high-water of the live blocks, blocks are served
// from freed pages without copying or faulting, and live blocks are never disturbed. Residency is
// read from the kernel (mincore), not from the pool's own bookkeeping.
#include "tessera/core/page_pool.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tessera/core/memory.h"

namespace tessera {
namespace {

const int64_t kPage = sysconf(_SC_PAGESIZE);
constexpr int64_t kMiB = int64_t{1} << 20;

void fill(void* p, int64_t bytes, unsigned char value) { std::memset(p, value, bytes); }

bool holds(const void* p, int64_t bytes, unsigned char value) {
  const auto* c = static_cast<const unsigned char*>(p);
  return std::all_of(c, c + bytes, [&](unsigned char x) { return x == value; });
}

TEST(PagePool, AFreedBlockIsReusedInPlace) {
  PagePool pool;
  void* a = pool.acquire(kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % kPage, 0u);
  fill(a, kMiB, 7);
  ASSERT_TRUE(pool.release(a));
  void* b = pool.acquire(kMiB);
  EXPECT_EQ(b, a);
  EXPECT_EQ(resident_bytes(b, kMiB), kMiB);  // the same pages, still there
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.live_bytes, kMiB);
  EXPECT_EQ(s.free_bytes, 0);
  EXPECT_EQ(s.moves, 0);
}

TEST(PagePool, ALongerRunGivesItsFrontAndKeepsTheRest) {
  PagePool pool;
  void* a = pool.acquire(3 * kMiB);
  ASSERT_TRUE(pool.release(a));
  void* b = pool.acquire(kMiB);
  void* c = pool.acquire(2 * kMiB);
  EXPECT_EQ(b, a);
  EXPECT_EQ(static_cast<char*>(c), static_cast<char*>(a) + kMiB);
  EXPECT_EQ(pool.stats().live_bytes, 3 * kMiB);
  EXPECT_EQ(pool.stats().free_bytes, 0);
}

// Three blocks of a megabyte filled with 1, 2, 3; the first and last released: two free runs apart.
// Returns the middle one, still live.
void* two_freed_megabytes_apart(PagePool& pool) {
  void* a = pool.acquire(kMiB);
  void* keep = pool.acquire(kMiB);
  void* c = pool.acquire(kMiB);
  fill(a, kMiB, 1);
  fill(keep, kMiB, 2);
  fill(c, kMiB, 3);
  EXPECT_TRUE(pool.release(a));
  EXPECT_TRUE(pool.release(c));
  return keep;
}

// The case a heap cannot serve without new memory: two freed blocks apart, a request for both.
TEST(PagePool, FreedBlocksApartAreMovedTogetherWithoutNewPages) {
  PagePool pool;
  void* keep = two_freed_megabytes_apart(pool);
  void* both = pool.acquire(2 * kMiB);
  ASSERT_NE(both, nullptr);
  // Both halves are pages that were resident already: moved, not faulted in (a fresh page is not
  // resident before it is touched).
  EXPECT_EQ(resident_bytes(both, 2 * kMiB), 2 * kMiB);
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.live_bytes + s.free_bytes, 3 * kMiB);
  EXPECT_EQ(s.moves, 2);
  EXPECT_TRUE(holds(keep, kMiB, 2));
  fill(both, 2 * kMiB, 4);
  EXPECT_TRUE(holds(keep, kMiB, 2));
  // Released again, the moved block is reused whole.
  ASSERT_TRUE(pool.release(both));
  EXPECT_EQ(pool.acquire(2 * kMiB), both);
}

TEST(PagePool, WhatThePoolLacksIsFreshMemory) {
  PagePool pool;
  void* a = pool.acquire(kMiB);
  fill(a, kMiB, 5);
  ASSERT_TRUE(pool.release(a));
  void* b = pool.acquire(3 * kMiB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(resident_bytes(b, 3 * kMiB), kMiB);  // the moved megabyte; the rest is untouched
  fill(b, 3 * kMiB, 6);
  EXPECT_TRUE(holds(b, 3 * kMiB, 6));
  EXPECT_EQ(pool.stats().live_bytes, 3 * kMiB);
  EXPECT_EQ(pool.stats().free_bytes, 0);
}

// A mover that fails its second call as a kernel before Linux 6.17 fails to move a piece spanning
// two mappings, after unmapping the destination (as some do).
int g_moves = 0;
void* second_move_fails(void* from, size_t bytes, void* to) {
  if (++g_moves == 2) {
    munmap(to, bytes);
    return MAP_FAILED;
  }
  return PagePool::move_pages(from, bytes, to);
}

TEST(PagePool, AFailedMoveLeavesAWholeBlock) {
  g_moves = 0;
  PagePool pool(16384, &second_move_fails);
  void* keep = two_freed_megabytes_apart(pool);
  void* both = pool.acquire(2 * kMiB);
  ASSERT_NE(both, nullptr);
  EXPECT_EQ(g_moves, 2);
  // The first megabyte moved (resident), the second mapped afresh (not yet), and all of it
  // writable: no hole where the failed move unmapped the destination.
  EXPECT_EQ(resident_bytes(both, 2 * kMiB), kMiB);
  fill(both, 2 * kMiB, 4);
  EXPECT_TRUE(holds(both, 2 * kMiB, 4));
  EXPECT_TRUE(holds(keep, kMiB, 2));
  // The piece that failed went back to the kernel rather than failing again.
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.moves, 1);
  EXPECT_EQ(s.live_bytes, 3 * kMiB);
  EXPECT_EQ(s.free_bytes, 0);
}

TEST(PagePool, ReleaseRefusesWhatItDidNotHandOut) {
  PagePool pool;
  void* a = pool.acquire(kMiB);
  EXPECT_FALSE(pool.release(static_cast<char*>(a) + kPage));
  int on_stack = 0;
  EXPECT_FALSE(pool.release(&on_stack));
  EXPECT_TRUE(pool.release(a));
  EXPECT_FALSE(pool.release(a));  // twice
}

// Random sizes and orders, as a step's activations: the pool never holds more pages than were
// ever live at once, every live block keeps its contents, and sizes that are not whole pages
// round up. With a low bound on pieces the runs are dropped now and then, and past it a request
// the free runs cannot hold is refused (the heap's then), which costs pages, not contents.
void churn(int64_t max_pieces) {
  PagePool pool(max_pieces);
  std::mt19937 rng(1234);
  struct Block {
    void* p;
    int64_t bytes;
    unsigned char value;
  };
  std::vector<Block> live;
  int64_t live_pages = 0, high_water = 0;
  const auto pages = [](int64_t bytes) { return (bytes + kPage - 1) / kPage; };
  for (int i = 0; i < 3000; ++i) {
    if (!live.empty() && (live.size() > 40 || rng() % 2 == 0)) {
      const size_t k = rng() % live.size();
      ASSERT_TRUE(holds(live[k].p, live[k].bytes, live[k].value))
          << "block " << k << ", step " << i;
      ASSERT_TRUE(pool.release(live[k].p));
      live_pages -= pages(live[k].bytes);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      const int64_t bytes = kPooledBytes + static_cast<int64_t>(rng() % (3 * kMiB));
      void* p = pool.acquire(bytes);
      if (p == nullptr) {  // only past the bound on mappings, with the free runs dropped
        ASSERT_GT(pool.stats().pieces, max_pieces);
        ASSERT_EQ(pool.stats().free_bytes, 0);
        continue;
      }
      const auto value = static_cast<unsigned char>(rng());
      fill(p, bytes, value);
      live.push_back({p, bytes, value});
      live_pages += pages(bytes);
      high_water = std::max(high_water, live_pages);
    }
    const PoolStats s = pool.stats();
    ASSERT_EQ(s.live_bytes, live_pages * kPage);
    if (s.dropped == 0) {
      ASSERT_LE(s.live_bytes + s.free_bytes, high_water * kPage);
    }
  }
  for (const Block& b : live) EXPECT_TRUE(holds(b.p, b.bytes, b.value));
  const PoolStats s = pool.stats();
  EXPECT_GT(s.moves, 0);
  if (max_pieces < 100) {
    EXPECT_GT(s.dropped, 0);
  } else {
    EXPECT_EQ(s.dropped, 0);
    EXPECT_EQ(s.live_bytes + s.free_bytes, high_water * kPage);
  }
}

TEST(PagePool, ChurnKeepsContentsAndStaysAtTheHighWater) { churn(16384); }

TEST(PagePool, ChurnWithFewPiecesDropsRunsAndKeepsContents) { churn(60); }

// tracked_alloc puts blocks of kPooledBytes or more in the process's pool, smaller ones on the
// heap; both free through tracked_free.
TEST(PagePool, TrackedAllocationsOfPoolSizeUseTheProcessPool) {
  const PoolStats before = process_page_pool().stats();
  void* big = tracked_alloc(kPooledBytes, MemoryCategory::kOther);
  void* small = tracked_alloc(kPooledBytes - 64, MemoryCategory::kOther);
  EXPECT_EQ(process_page_pool().stats().live_bytes - before.live_bytes,
            static_cast<int64_t>(kPooledBytes));
  tracked_free(small, kPooledBytes - 64, MemoryCategory::kOther);
  tracked_free(big, kPooledBytes, MemoryCategory::kOther);
  EXPECT_EQ(process_page_pool().stats().live_bytes, before.live_bytes);
}

// process_baseline_bytes leaves out the accountant's blocks: 64 MiB more of them, touched (fresh
// pages, more than the pool had free), move the resident set by that much and the baseline by
// little.
TEST(ProcessBaseline, LeavesOutTheAccountantsBlocks) {
  const int64_t bytes = 64 * kMiB;
  ASSERT_LT(process_page_pool().stats().free_bytes, bytes / 2);
  const int64_t rss = process_resident_bytes(), baseline = process_baseline_bytes();
  ASSERT_GT(baseline, 0);
  void* p = tracked_alloc(bytes, MemoryCategory::kOther);
  fill(p, bytes, 9);
  EXPECT_GT(process_resident_bytes() - rss, bytes / 2);
  EXPECT_LT(std::abs(process_baseline_bytes() - baseline), 2 * kMiB);
  tracked_free(p, bytes, MemoryCategory::kOther);
}

}  // namespace
}  // namespace tessera
