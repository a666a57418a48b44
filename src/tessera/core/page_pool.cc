#include "tessera/core/page_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessera/core/memory.h"

namespace tessera {
namespace {

// A range of pages inside one kernel mapping: what one mremap may move.
struct Piece {
  uintptr_t begin;
  size_t bytes;
};

// Contiguous pages made of pieces in address order (a block handed out, or a free run).
struct Run {
  std::vector<Piece> pieces;
  size_t bytes = 0;
  uintptr_t begin() const { return pieces.front().begin; }
  uintptr_t end() const { return begin() + bytes; }
};

}  // namespace

struct PagePool::State {
  State(int64_t max, PagePool::Mover move) : max_pieces(max), move_(move) {}

  void* acquire(size_t bytes) {
    const size_t n = (bytes + page_bytes() - 1) / page_bytes() * page_bytes();
    std::lock_guard<std::mutex> lock(mu_);
    // The shortest free run that holds the block: its front, nothing moves.
    if (auto fit = free_by_bytes_.lower_bound(n); fit != free_by_bytes_.end()) {
      Run run = take_free(fit->second);
      Run block = take_front(run, n);
      if (run.bytes > 0) put_free(std::move(run));
      return hand_out(std::move(block));
    }
    if (stats_.pieces > max_pieces) drop_free();
    // Still over: the live blocks alone hold that many mappings; the heap takes the block rather
    // than the pool eating into the mappings MPI, threads and the libraries need.
    if (stats_.pieces > max_pieces) return nullptr;
    void* range = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (range == MAP_FAILED) return nullptr;
    ++stats_.pieces;  // the range, until pieces are moved over it
    const uintptr_t dst = reinterpret_cast<uintptr_t>(range);
    Run block;
    block.bytes = n;
    size_t filled = 0;
    // The free runs, longest first, moved into the new range (a run longer than what is missing
    // gives its front). Moving over the range replaces its untouched pages: nothing is freed
    // twice, nothing faulted.
    bool moving = true;
    while (moving && filled < n && !free_by_bytes_.empty()) {
      Run run = take_free(std::prev(free_by_bytes_.end())->second);
      Run part = take_front(run, std::min(run.bytes, n - filled));
      if (run.bytes > 0) put_free(std::move(run));
      for (size_t i = 0; i < part.pieces.size(); ++i) {
        const Piece p = part.pieces[i];
        void* moved =
            move_(reinterpret_cast<void*>(p.begin), p.bytes, reinterpret_cast<void*>(dst + filled));
        if (moved == MAP_FAILED) {
          // Out of mappings, or (Linux before 6.17) a piece that has come to span two mappings
          // (madvise on part of a block splits its mapping): the move fails, on some kernels
          // after unmapping the destination. The piece goes back to the kernel (it would
          // fail again), the rest of the run stays free where it is, and the range's tail is
          // mapped afresh below.
          munmap(reinterpret_cast<void*>(p.begin), p.bytes);
          --stats_.pieces;
          Run rest;
          rest.pieces.assign(part.pieces.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                             part.pieces.end());
          for (const Piece& q : rest.pieces) rest.bytes += q.bytes;
          if (rest.bytes > 0) put_free(std::move(rest));
          moving = false;
          break;
        }
        block.pieces.push_back({dst + filled, p.bytes});
        filled += p.bytes;
        ++stats_.moves;
      }
    }
    if (filled == n) {
      --stats_.pieces;  // the range is all moved pieces now
      return hand_out(std::move(block));
    }
    // What the pool lacked: fresh pages. After a failed move the tail may have been unmapped:
    // it is mapped again in place (MAP_FIXED replaces what is left there, ours); if even that
    // fails, the block is given up, moved pages with it, and the heap takes the request.
    void* tail = reinterpret_cast<void*>(dst + filled);
    if (!moving && mmap(tail, n - filled, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
      munmap(range, n);
      stats_.pieces -= static_cast<int64_t>(block.pieces.size()) + 1;
      return nullptr;
    }
    block.pieces.push_back({dst + filled, n - filled});
    return hand_out(std::move(block));
  }

  bool release(void* ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == live_.end()) return false;
    Run run = std::move(it->second);
    live_.erase(it);
    stats_.live_bytes -= static_cast<int64_t>(run.bytes);
    put_free(std::move(run));
    return true;
  }

  PoolStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void* hand_out(Run block) {
    const uintptr_t begin = block.begin();
    stats_.live_bytes += static_cast<int64_t>(block.bytes);
    live_.emplace(begin, std::move(block));
    return reinterpret_cast<void*>(begin);
  }

  // The first `bytes` of `run` (a whole number of pages), split off it; a piece across the cut
  // becomes two.
  Run take_front(Run& run, size_t bytes) {
    Run front;
    front.bytes = bytes;
    size_t i = 0, taken = 0;
    while (taken + run.pieces[i].bytes <= bytes) {
      taken += run.pieces[i].bytes;
      if (++i == run.pieces.size()) break;
    }
    front.pieces.assign(run.pieces.begin(), run.pieces.begin() + static_cast<std::ptrdiff_t>(i));
    run.pieces.erase(run.pieces.begin(), run.pieces.begin() + static_cast<std::ptrdiff_t>(i));
    if (taken < bytes) {
      Piece& cut = run.pieces.front();
      front.pieces.push_back({cut.begin, bytes - taken});
      cut.begin += bytes - taken;
      cut.bytes -= bytes - taken;
      ++stats_.pieces;
    }
    run.bytes -= bytes;
    return front;
  }

  // Adds a run to the free ones, joined with the free runs just before and after it.
  void put_free(Run run) {
    stats_.free_bytes += static_cast<int64_t>(run.bytes);
    if (auto next = free_by_begin_.find(run.end()); next != free_by_begin_.end()) {
      Run after = take_free(next->first);
      stats_.free_bytes += static_cast<int64_t>(after.bytes);
      run.pieces.insert(run.pieces.end(), after.pieces.begin(), after.pieces.end());
      run.bytes += after.bytes;
    }
    if (auto next = free_by_begin_.lower_bound(run.begin()); next != free_by_begin_.begin()) {
      const auto before = std::prev(next);
      if (before->second.end() == run.begin()) {
        Run joined = take_free(before->first);
        stats_.free_bytes += static_cast<int64_t>(joined.bytes);
        joined.pieces.insert(joined.pieces.end(), run.pieces.begin(), run.pieces.end());
        joined.bytes += run.bytes;
        run = std::move(joined);
      }
    }
    free_by_bytes_.emplace(run.bytes, run.begin());
    free_by_begin_.emplace(run.begin(), std::move(run));
  }

  // Removes the free run starting at `begin` and returns it.
  Run take_free(uintptr_t begin) {
    const auto it = free_by_begin_.find(begin);
    Run run = std::move(it->second);
    free_by_begin_.erase(it);
    auto [first, last] = free_by_bytes_.equal_range(run.bytes);
    for (; first != last; ++first)
      if (first->second == begin) {
        free_by_bytes_.erase(first);
        break;
      }
    stats_.free_bytes -= static_cast<int64_t>(run.bytes);
    return run;
  }

  // Unmaps every free run: their pages go back to the kernel and the pieces' count falls to the
  // live blocks'.
  void drop_free() {
    for (auto& [begin, run] : free_by_begin_) {
      munmap(reinterpret_cast<void*>(begin), run.bytes);
      stats_.pieces -= static_cast<int64_t>(run.pieces.size());
    }
    free_by_begin_.clear();
    free_by_bytes_.clear();
    stats_.free_bytes = 0;
    ++stats_.dropped;
  }

  // Unmaps every page (the pool's end).
  void unmap_all() {
    for (auto& [begin, run] : live_) munmap(reinterpret_cast<void*>(begin), run.bytes);
    for (auto& [begin, run] : free_by_begin_) munmap(reinterpret_cast<void*>(begin), run.bytes);
  }

  const int64_t max_pieces;
  const PagePool::Mover move_;
  mutable std::mutex mu_;
  std::unordered_map<uintptr_t, Run> live_;
  std::map<uintptr_t, Run> free_by_begin_;
  std::multimap<size_t, uintptr_t> free_by_bytes_;
  PoolStats stats_;
};

void* PagePool::move_pages(void* from, size_t bytes, void* to) {
  return mremap(from, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, to);
}

PagePool::PagePool(int64_t max_pieces, Mover move) : state_(new State(max_pieces, move)) {}

PagePool::~PagePool() {
  state_->unmap_all();
  delete state_;
}

void* PagePool::acquire(size_t bytes) { return state_->acquire(bytes); }

bool PagePool::release(void* ptr) { return state_->release(ptr); }

PoolStats PagePool::stats() const { return state_->stats(); }

PagePool& process_page_pool() {
  static PagePool* const pool = new PagePool;
  return *pool;
}

}  // namespace tessera
