#include "tessera/offload/param_swap.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/core/memory.h"

namespace tessera::offload {

ParamSwap::ParamSwap(SwapDirectory& dir, SwapIo& io, const std::string& name,
                     const ParamSwapOptions& options)
    : dir_(dir), io_(io), name_(name), options_(options) {
  TESSERA_CHECK(options_.buffer_count >= 1 && options_.buffer_size > 0 && options_.max_in_cpu >= 0);
}

ParamSwap::~ParamSwap() { reset_slots(); }

namespace {

// Elements of a buffer: a piece (buffer_size elements), or the largest swapped part if smaller.
int64_t piece_elements(const ParamSwapOptions& options, int64_t largest_swapped) {
  return std::min(options.buffer_size, largest_swapped);
}

// Bytes of one buffer: a piece, aligned for O_DIRECT.
int64_t slot_bytes(const ParamSwapOptions& options, int64_t largest_swapped, int64_t elem_bytes,
                   int64_t alignment) {
  return io::align_up(piece_elements(options, largest_swapped) * elem_bytes, alignment);
}

// Which parts (their elements, in flat order; 0: nothing swapped) max_in_cpu keeps in memory:
// the longest run of them from the first that fits.
std::vector<bool> kept_in_memory(const std::vector<int64_t>& part_elems, int64_t max_in_cpu) {
  std::vector<bool> kept(part_elems.size(), false);
  int64_t total = 0;
  for (size_t i = 0; i < part_elems.size(); ++i) {
    if (part_elems[i] == 0) continue;
    if (total + part_elems[i] > max_in_cpu) break;
    total += part_elems[i];
    kept[i] = true;
  }
  return kept;
}

}  // namespace

ParamSwap::Sizes ParamSwap::sizes_for(const std::vector<int64_t>& part_elems,
                                      const ParamSwapOptions& options, int64_t elem_bytes,
                                      int64_t alignment) {
  Sizes out;
  out.kept = kept_in_memory(part_elems, options.max_in_cpu);
  const std::vector<bool>& kept = out.kept;
  int64_t largest = 0;
  for (size_t i = 0; i < part_elems.size(); ++i) {
    if (kept[i])
      out.kept_elems += part_elems[i];
    else
      largest = std::max(largest, part_elems[i]);
  }
  if (largest > 0)
    out.buffer_bytes = options.buffer_count * slot_bytes(options, largest, elem_bytes, alignment);
  return out;
}

void ParamSwap::initialize(Tensor& values, std::vector<Range> parts) {
  TESSERA_CHECK(base_ == nullptr);
  base_ = static_cast<uint8_t*>(values.raw());
  elem_bytes_ = static_cast<int64_t>(dtype_size(values.dtype()));
  unit_part_.assign(parts.size(), -1);
  std::vector<int> flat_order(parts.size());
  std::iota(flat_order.begin(), flat_order.end(), 0);
  std::stable_sort(flat_order.begin(), flat_order.end(),
                   [&](int a, int b) { return parts[a].first < parts[b].first; });
  std::vector<int64_t> sizes;
  for (int u : flat_order) {
    const auto [b, e] = parts[u];
    TESSERA_CHECK(0 <= b && b <= e && e <= values.numel());
    sizes.push_back(e - b);
  }
  const std::vector<bool> kept = kept_in_memory(sizes, options_.max_in_cpu);
  int64_t largest = 0;
  for (size_t i = 0; i < flat_order.size(); ++i) {
    const int u = flat_order[i];
    const auto [b, e] = parts[u];
    if (b == e) continue;
    if (kept[i]) {
      kept_elems_ += e - b;
      continue;
    }
    unit_part_[u] = static_cast<int>(parts_.size());
    parts_.push_back(Part{b, e, 0, 0});
    largest = std::max(largest, e - b);
  }
  if (parts_.empty()) return;
  alignment_ = io::direct_io_alignment(dir_.path()).strictest();
  const int64_t piece_elems = piece_elements(options_, largest);
  for (Part& part : parts_) {
    part.first_piece = static_cast<int>(pieces_.size());
    for (int64_t b = part.begin; b < part.end; b += piece_elems) {
      pieces_.push_back(Piece{b, std::min(part.end, b + piece_elems), file_bytes_});
      file_bytes_ += io_bytes(pieces_.back());
    }
    part.pieces = static_cast<int>(pieces_.size()) - part.first_piece;
  }
  dir_.check_space(file_bytes_, "the parameters' swap file");
  file_ = io::DirectFile::create(dir_.file(name_), file_bytes_);
  const int64_t bytes = slot_bytes(options_, largest, elem_bytes_, alignment_);
  for (int k = 0; k < options_.buffer_count; ++k)
    slots_.push_back(Slot{io::AlignedBuffer(bytes, alignment_, MemoryCategory::kParams)});
}

int64_t ParamSwap::buffer_bytes() const {
  return slots_.empty() ? 0 : static_cast<int64_t>(slots_.size()) * slots_[0].buffer.size();
}

int64_t ParamSwap::swapped_elems() const {
  int64_t total = 0;
  for (const Part& part : parts_) total += part.end - part.begin;
  return total;
}

int64_t ParamSwap::io_bytes(const Piece& p) const {
  return io::align_up((p.end - p.begin) * elem_bytes_, alignment_);
}

int ParamSwap::free_slot() const {
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].piece < 0 && slots_[s].pending < 0) return static_cast<int>(s);
  return -1;
}

void ParamSwap::start_piece(int s, int k) {
  Piece& piece = pieces_[k];
  Slot& slot = slots_[s];
  slot.pending = io_.read(file_, slot.buffer.data(), io_bytes(piece), piece.offset);
  slot.piece = k;
  piece.slot = s;
}

void ParamSwap::finish(int s) {
  Slot& slot = slots_[s];
  if (slot.pending < 0) return;
  const io::AsyncIo::Ticket ticket = slot.pending;
  slot.pending = -1;
  io_.wait(ticket);
}

void ParamSwap::drop_read(int s) {
  finish(s);
  pieces_[slots_[s].piece].slot = -1;
  slots_[s].piece = -1;
}

void ParamSwap::reset_slots() noexcept {
  for (Slot& slot : slots_) {
    if (slot.pending >= 0) {
      try {
        io_.wait(slot.pending);
      } catch (...) {
        // The first error was reported already, or the run is ending.
      }
    }
    if (slot.piece >= 0) pieces_[slot.piece].slot = -1;
    slot.pending = -1;
    slot.piece = -1;
  }
}

bool ParamSwap::start_read(int unit) {
  const int p = unit_part_[unit];
  if (p < 0 || parts_[p].in_memory) return true;
  const Part& part = parts_[p];
  for (int k = part.first_piece; k < part.first_piece + part.pieces; ++k) {
    if (pieces_[k].slot >= 0) continue;  // on its way already
    const int s = free_slot();
    if (s < 0) return false;
    start_piece(s, k);
  }
  return true;
}

void ParamSwap::wait_read(int unit) {
  const int p = unit_part_[unit];
  if (p < 0 || parts_[p].in_memory) return;
  Part& part = parts_[p];
  const int end = part.first_piece + part.pieces;
  try {
    for (int k = part.first_piece; k < end; ++k) {
      // Keep the rest of the part coming while this piece is waited for.
      for (int j = k; j < end; ++j) {
        if (pieces_[j].slot >= 0) continue;
        const int s = free_slot();
        if (s < 0) break;
        start_piece(s, j);
      }
      if (pieces_[k].slot < 0) {
        // Every buffer holds a read ahead: the latest started is the one needed last.
        int victim = -1;
        for (size_t s = 0; s < slots_.size(); ++s)
          if (slots_[s].piece >= 0 && (victim < 0 || slots_[s].pending > slots_[victim].pending))
            victim = static_cast<int>(s);
        TESSERA_CHECK(victim >= 0);
        drop_read(victim);
        start_piece(victim, k);
      }
      const int s = pieces_[k].slot;
      finish(s);
      const Piece& piece = pieces_[k];
      std::memcpy(flat(piece.begin), slots_[s].buffer.data(),
                  static_cast<size_t>((piece.end - piece.begin) * elem_bytes_));
      slots_[s].piece = -1;
      pieces_[k].slot = -1;
    }
  } catch (...) {
    reset_slots();  // no buffer is reused under a request still in flight
    throw;
  }
  part.in_memory = true;
}

void ParamSwap::release(int unit) {
  const int p = unit_part_[unit];
  if (p < 0 || !parts_[p].in_memory) return;
  Part& part = parts_[p];
  release_pages(flat(part.begin), static_cast<size_t>((part.end - part.begin) * elem_bytes_));
  part.in_memory = false;
}

void ParamSwap::cancel_reads() {
  try {
    for (size_t s = 0; s < slots_.size(); ++s)
      if (slots_[s].piece >= 0) drop_read(static_cast<int>(s));
  } catch (...) {
    reset_slots();
    throw;
  }
}

void ParamSwap::write_part(Part& part) {
  for (int k = part.first_piece; k < part.first_piece + part.pieces; ++k) {
    int s = free_slot();
    if (s < 0) {
      // All buffers are being written: the oldest write is the likeliest to be done.
      s = 0;
      for (size_t t = 1; t < slots_.size(); ++t)
        if (slots_[t].pending < slots_[s].pending) s = static_cast<int>(t);
      finish(s);
    }
    const Piece& piece = pieces_[k];
    const int64_t bytes = (piece.end - piece.begin) * elem_bytes_;
    auto* buffer = static_cast<uint8_t*>(slots_[s].buffer.data());
    std::memcpy(buffer, flat(piece.begin), static_cast<size_t>(bytes));
    // The alignment padding: zeros, so the file's bytes depend on the values only.
    std::memset(buffer + bytes, 0, static_cast<size_t>(io_bytes(piece) - bytes));
    slots_[s].pending = io_.write(file_, buffer, io_bytes(piece), piece.offset);
  }
  // Copied out: the part's memory can go while its writes complete.
  release_pages(flat(part.begin), static_cast<size_t>((part.end - part.begin) * elem_bytes_));
  part.in_memory = false;
}

void ParamSwap::write_out_through(int64_t flat_end) {
  // The step must come in flat order: a part written before the step reached its end would be
  // saved with old values, and nothing would notice.
  TESSERA_CHECK_MSG(flat_end >= through_, "write_out_through went back from element " +
                                              std::to_string(through_) + " to " +
                                              std::to_string(flat_end));
  through_ = flat_end;
  if (next_out_ == 0) cancel_reads();
  try {
    for (; next_out_ < parts_.size() && parts_[next_out_].end <= flat_end; ++next_out_)
      write_part(parts_[next_out_]);
  } catch (...) {
    reset_slots();
    throw;
  }
}

void ParamSwap::write_out_all() {
  write_out_through(INT64_MAX);
  next_out_ = 0;
  through_ = 0;
  try {
    for (size_t s = 0; s < slots_.size(); ++s) finish(static_cast<int>(s));
  } catch (...) {
    reset_slots();
    throw;
  }
}

}  // namespace tessera::offload
