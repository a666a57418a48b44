#include "tessera/offload/nvme_state_storage.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/core/memory.h"

namespace tessera::offload {

NvmeStateStorage::NvmeStateStorage(SwapDirectory& dir, SwapIo& io, const std::string& name,
                                   const NvmeStateOptions& options)
    : dir_(dir), io_(io), name_(name), options_(options) {
  TESSERA_CHECK(options_.buffer_count >= 2 && options_.sub_group_size > 0);
}

NvmeStateStorage::~NvmeStateStorage() { wait_all_requests(); }

void NvmeStateStorage::wait_for(io::AsyncIo::Ticket& ticket) {
  if (ticket < 0) return;
  const io::AsyncIo::Ticket t = ticket;
  ticket = -1;  // cleared first: an error leaves no ticket behind to wait for again
  io_.wait(t);
}

void NvmeStateStorage::wait_gradient_writes() {
  for (GradientChunk& c : chunks_) wait_for(c.pending);
}

void NvmeStateStorage::wait_all_requests() {
  const auto wait = [&](io::AsyncIo::Ticket& ticket) {
    try {
      wait_for(ticket);
    } catch (...) {
    }
  };
  for (Slot& slot : slots_) {
    wait(slot.pending);
    wait(slot.grad_pending);
  }
  for (GradientChunk& chunk : chunks_) wait(chunk.pending);
}

namespace {

// Elements per sub-group: the configured size, no larger than the state, rounded up so every
// sub-group starts on an O_DIRECT boundary.
int64_t group_elems(int64_t numel, int64_t sub_group_size, int64_t alignment) {
  return io::align_up(std::max<int64_t>(1, std::min(numel, sub_group_size)) * 4, alignment) / 4;
}

// Arrays in a buffer: the state's, and the gradients when held.
int slot_arrays(int arrays, const NvmeStateOptions& options) {
  return arrays + (options.gradients ? 1 : 0);
}

// The gradient chunk: NvmeStateOptions::gradient_chunk_bytes rounded up to the alignment, no
// larger than the gradients' file.
int64_t chunk_bytes_for(int64_t grad_file_bytes, const NvmeStateOptions& options,
                        int64_t alignment) {
  return std::min(io::align_up(std::max<int64_t>(1, options.gradient_chunk_bytes), alignment),
                  grad_file_bytes);
}

}  // namespace

int64_t NvmeStateStorage::file_bytes_for(int64_t numel, int arrays, const NvmeStateOptions& options,
                                         int64_t alignment) {
  if (numel == 0) return 0;
  const int64_t group = group_elems(numel, options.sub_group_size, alignment);
  return (numel + group - 1) / group * group * 4 * slot_arrays(arrays, options);
}

int64_t NvmeStateStorage::buffer_bytes_for(int64_t numel, int arrays,
                                           const NvmeStateOptions& options, int64_t alignment) {
  if (numel == 0) return 0;
  const int64_t group = group_elems(numel, options.sub_group_size, alignment);
  const int64_t chunks =
      options.gradients ? kGradientChunks * chunk_bytes_for((numel + group - 1) / group * group * 4,
                                                            options, alignment)
                        : 0;
  return options.buffer_count * group * 4 * slot_arrays(arrays, options) + chunks;
}

void NvmeStateStorage::initialize(int64_t numel, int arrays, const Initializer& init) {
  numel_ = numel;
  arrays_ = arrays;
  init_ = init;
  if (numel == 0) return;
  const int64_t alignment = io::direct_io_alignment(dir_.path()).strictest();
  group_ = group_elems(numel, options_.sub_group_size, alignment);
  align_elems_ = alignment / 4;
  sub_groups_ = (numel + group_ - 1) / group_;
  state_bytes_ = group_ * 4 * arrays_;
  slot_bytes_ = group_ * 4 * slot_arrays(arrays_, options_);
  alignment_ = alignment;
  if (options_.gradients)
    chunk_bytes_ = chunk_bytes_for(sub_groups_ * group_ * 4, options_, alignment);
  // The buffers are allocated and touched whole: buffers larger than the host's memory (with
  // those of the run's other ranks there) can never run, and would end in the kernel's OOM kill
  // rather than an error (DeepSpeed's default sub_group_size of 1e9 elements makes 12 GB buffers
  // of master weights and Adam's moments). Not checked where the host's memory is unknown.
  const double host = host_memory_bytes();
  const double needed = static_cast<double>(buffer_bytes()) * options_.ranks_on_host;
  if (host > 0 && needed > host) {
    char text[400];
    std::snprintf(
        text, sizeof(text),
        "offload_optimizer: %d buffers of a sub-group (%lld elements x %d fp32 arrays) "
        "need %.1f GB of host memory%s, more than this host's %.1f GB: lower "
        "zero_optimization.sub_group_size (--offload-sub-group-size) or "
        "offload_optimizer.buffer_count (--offload-buffer-count)",
        options_.buffer_count, static_cast<long long>(group_), slot_arrays(arrays_, options_),
        needed / 1e9,
        options_.ranks_on_host > 1
            ? (" for the " + std::to_string(options_.ranks_on_host) + " ranks there").c_str()
            : "",
        host / 1e9);
    throw Error(text);
  }
  dir_.check_space(file_bytes(), "the optimizer's swap files");
  file_ = io::DirectFile::create(dir_.file(name_), sub_groups_ * state_bytes_);
  if (options_.gradients) {
    grad_file_ = io::DirectFile::create(dir_.file(name_ + ".gradients"), sub_groups_ * group_ * 4);
    for (int k = 0; k < kGradientChunks; ++k)
      chunks_.push_back(
          GradientChunk{io::AlignedBuffer(chunk_bytes_, alignment, MemoryCategory::kOptimizer)});
  }
  for (int k = 0; k < options_.buffer_count; ++k)
    slots_.push_back(Slot{io::AlignedBuffer(slot_bytes_, alignment, MemoryCategory::kOptimizer)});
  written_.assign(sub_groups_, false);
  if (options_.fast_init) return;  // produced by init_ when first visited
  // Write the initial state, one sub-group per free buffer, the writes in flight together.
  for (int64_t g = 0; g < sub_groups_; ++g) {
    const int s = free_slot(true);
    slots_[s].group = g;
    init_(window_of(slots_[s]));
    slots_[s].pending = io_.write(file_, slots_[s].buffer.data(), io_bytes_of(g), offset_of(g));
    slots_[s].writing = true;
    slots_[s].group = -1;
    written_[g] = true;
  }
  for (size_t s = 0; s < slots_.size(); ++s) finish(static_cast<int>(s));
}

int64_t NvmeStateStorage::length_of(int64_t group) const {
  return std::min(numel_, (group + 1) * group_) - group * group_;
}

int64_t NvmeStateStorage::padded_of(int64_t group) const {
  return (length_of(group) + align_elems_ - 1) / align_elems_ * align_elems_;
}

optim::StateStorage::Window NvmeStateStorage::window_of(Slot& slot) {
  Window w{slot.group * group_, slot.group * group_ + length_of(slot.group), {}};
  float* base = slot.buffer.as<float>();
  for (int k = 0; k < arrays_; ++k) w.arrays.push_back(base + k * padded_of(slot.group));
  return w;
}

void NvmeStateStorage::finish(int s) {
  Slot& slot = slots_[s];
  wait_for(slot.grad_pending);
  if (slot.pending < 0) return;
  slot.writing = false;
  slot.writing_group = -1;
  wait_for(slot.pending);
}

int NvmeStateStorage::free_slot(bool may_wait) {
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].pending < 0 && slots_[s].group < 0) return static_cast<int>(s);
  if (!may_wait) return -1;
  // The oldest write (the lowest ticket) is the likeliest to be done.
  int oldest = -1;
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].writing && (oldest < 0 || slots_[s].pending < slots_[oldest].pending))
      oldest = static_cast<int>(s);
  if (oldest >= 0) finish(oldest);
  return oldest;
}

void NvmeStateStorage::start_read(int s, int64_t group, bool with_grads) {
  Slot& slot = slots_[s];
  slot.group = group;
  slot.has_grads = false;
  // A sub-group never written (fast_init) is produced by the initialiser instead.
  if (written_[group])
    slot.pending = io_.read(file_, slot.buffer.data(), io_bytes_of(group), offset_of(group));
  if (with_grads) start_gradient_read(s);
}

void NvmeStateStorage::start_gradient_read(int s) {
  Slot& slot = slots_[s];
  const int64_t g = slot.group;
  slot.grad_pending = io_.read(grad_file_, static_cast<char*>(slot.buffer.data()) + state_bytes_,
                               padded_of(g) * 4, g * group_ * 4);
  slot.has_grads = true;
}

NvmeStateStorage::GradientChunk& NvmeStateStorage::chunk_for(int64_t index) {
  for (GradientChunk& c : chunks_)
    if (c.index == index) return c;
  for (GradientChunk& c : chunks_)
    if (c.index < 0 && c.pending < 0) return c;
  // Every chunk is being filled or written: wait for the oldest write (the lowest ticket).
  GradientChunk* oldest = nullptr;
  for (GradientChunk& c : chunks_)
    if (c.pending >= 0 && (oldest == nullptr || c.pending < oldest->pending)) oldest = &c;
  if (oldest) {
    wait_for(oldest->pending);
    return *oldest;
  }
  // Every chunk is partly filled: the pieces left gaps (parts stored later, after the
  // tensor-parallel completion of their gradients). One more buffer, kept for the run.
  chunks_.push_back(
      GradientChunk{io::AlignedBuffer(chunk_bytes_, alignment_, MemoryCategory::kOptimizer)});
  return chunks_.back();
}

void NvmeStateStorage::fill_chunks(int64_t begin, int64_t end, const char* src) {
  for (int64_t k = begin / chunk_bytes_; k * chunk_bytes_ < end; ++k) {
    const int64_t chunk_begin = k * chunk_bytes_;
    const int64_t lo = std::max(begin, chunk_begin), hi = std::min(end, chunk_begin + chunk_bytes_);
    GradientChunk& c = chunk_for(k);
    c.index = k;
    if (src)
      std::memcpy(static_cast<char*>(c.buffer.data()) + (lo - chunk_begin), src + (lo - begin),
                  hi - lo);
    c.filled += hi - lo;
    // The chunk's gradients (the last one ends with the file's elements) are all there: write
    // it, padded to the alignment (the padding lies past the last sub-group's elements).
    const int64_t data = std::min(chunk_bytes_, numel_ * 4 - chunk_begin);
    if (c.filled == data) {
      c.pending =
          io_.write(grad_file_, c.buffer.data(), io::align_up(data, alignment_), chunk_begin);
      c.index = -1;
      c.filled = 0;
    }
  }
}

void NvmeStateStorage::patch_gradients(int64_t begin, int64_t end, const char* src) {
  for (const GradientChunk& c : chunks_)
    TESSERA_CHECK_MSG(c.index < 0, "internal: a deferred gradient came before all others");
  wait_gradient_writes();  // the blocks read below must hold what the chunks wrote
  // Through the first chunk's buffer (every chunk is idle now), a chunk's worth of aligned
  // blocks at a time; a window the piece covers only partly is read first.
  char* window = static_cast<char*>(chunks_.front().buffer.data());
  const int64_t lo = begin / alignment_ * alignment_, hi = io::align_up(end, alignment_);
  for (int64_t at = lo; at < hi; at += chunk_bytes_) {
    const int64_t to = std::min(hi, at + chunk_bytes_);
    const int64_t from_piece = std::max(begin, at), to_piece = std::min(end, to);
    if (from_piece > at || to_piece < to) io_.wait(io_.read(grad_file_, window, to - at, at));
    std::memcpy(window + (from_piece - at), src + (from_piece - begin), to_piece - from_piece);
    io_.wait(io_.write(grad_file_, window, to - at, at));
  }
}

void NvmeStateStorage::store_gradients(int64_t packed_begin, const float* grads, int64_t count) {
  TESSERA_CHECK(options_.gradients && packed_begin >= 0 && count >= 0 &&
                packed_begin + count <= numel_);
  const int64_t begin = packed_begin * 4, end = (packed_begin + count) * 4;
  const char* src = reinterpret_cast<const char*>(grads);
  const auto deferred = std::find_if(deferred_.begin(), deferred_.end(), [&](const auto& d) {
    return d.first < end && begin < d.second;
  });
  if (deferred == deferred_.end()) {
    fill_chunks(begin, end, src);
  } else {
    TESSERA_CHECK_MSG(deferred->first <= begin && end <= deferred->second,
                      "internal: stored gradients straddle a deferred piece's edge");
    patch_gradients(begin, end, src);
  }
  grad_bytes_stored_ += end - begin;
  grads_ready_ = false;
}

void NvmeStateStorage::defer_gradients(int64_t packed_begin, int64_t count) {
  TESSERA_CHECK(options_.gradients && packed_begin >= 0 && count >= 0 &&
                packed_begin + count <= numel_);
  if (count == 0) return;
  deferred_.emplace_back(packed_begin * 4, (packed_begin + count) * 4);
  fill_chunks(packed_begin * 4, (packed_begin + count) * 4, nullptr);
  grads_ready_ = false;
}

void NvmeStateStorage::gradients_stored() {
  if (!options_.gradients) return;
  TESSERA_CHECK_MSG(grad_bytes_stored_ == numel_ * 4,
                    "internal: not every owned gradient was stored before the step");
  for (const GradientChunk& c : chunks_)
    TESSERA_CHECK_MSG(c.index < 0, "internal: a gradient chunk was not filled");
  wait_gradient_writes();
  grad_bytes_stored_ = 0;
  deferred_.clear();
  grads_ready_ = true;
}

void NvmeStateStorage::prefetch() {
  if (numel_ == 0) return;
  const int64_t ahead = std::min<int64_t>(sub_groups_, static_cast<int64_t>(slots_.size()) - 1);
  for (int64_t g = 0; g < ahead; ++g) {
    if (slot_of(g) >= 0) continue;
    // A read must not pass a write of the same sub-group still in flight; the slots keep a
    // prefix of the sub-groups, so stop there.
    bool written_now = false;
    for (const Slot& slot : slots_) written_now |= slot.writing && slot.writing_group == g;
    if (written_now) break;
    const int free = free_slot(false);
    if (free < 0) break;
    start_read(free, g, false);  // the gradients are not written yet
  }
}

int NvmeStateStorage::slot_of(int64_t group) const {
  for (size_t k = 0; k < slots_.size(); ++k)
    if (slots_[k].group == group) return static_cast<int>(k);
  return -1;
}

void NvmeStateStorage::for_each_window(optim::StateAccess access,
                                       const std::function<void(const Window&)>& fn) {
  if (numel_ == 0) return;
  const bool grads = access == optim::StateAccess::kStep && options_.gradients;
  TESSERA_CHECK_MSG(!grads || grads_ready_, "internal: a step before its gradients were stored");
  // Writes of the last visit may still be in flight (pipeline_write): finish them, so a read
  // of the same sub-group sees the new state. Reads started by prefetch() are kept.
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].writing) finish(static_cast<int>(s));
  try {
    int64_t next_read = 0;
    for (int64_t g = 0; g < sub_groups_; ++g) {
      int s = slot_of(g);
      if (s < 0) {
        s = free_slot(true);
        TESSERA_CHECK(s >= 0);
        start_read(s, g, grads);
      } else if (grads && !slots_[s].has_grads) {
        start_gradient_read(s);  // read ahead by prefetch(), before the gradients existed
      }
      next_read = std::max(next_read, g + 1);
      if (options_.pipeline_read)
        for (; next_read < sub_groups_; ++next_read) {
          if (const int held = slot_of(next_read); held >= 0) {  // read ahead by prefetch()
            if (grads && !slots_[held].has_grads) start_gradient_read(held);
            continue;
          }
          const int f = free_slot(true);
          if (f < 0) break;
          start_read(f, next_read, grads);
        }
      finish(s);
      Slot& slot = slots_[s];
      Window w = window_of(slot);
      if (!written_[g]) init_(w);
      if (grads) w.grads = slot.buffer.as<float>() + state_bytes_ / 4;
      fn(w);
      if (access != optim::StateAccess::kRead) {
        slot.pending = io_.write(file_, slot.buffer.data(), io_bytes_of(g), offset_of(g));
        slot.writing = true;
        slot.writing_group = g;
        written_[g] = true;
        if (!options_.pipeline_write) finish(s);
        if (kill_after_ >= 0 && g + 1 >= kill_after_) {
          finish(s);
          std::raise(SIGKILL);
        }
      }
      slot.group = -1;
      slot.has_grads = false;
    }
    if (grads) grads_ready_ = false;  // a step uses them once
  } catch (...) {
    // No buffer may be reused (or freed) under a request still in flight; the first error is
    // the one reported.
    wait_all_requests();
    for (Slot& slot : slots_) slot = Slot{std::move(slot.buffer)};
    throw;
  }
}

}  // namespace tessera::offload
