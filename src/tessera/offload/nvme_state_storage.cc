#include "tessera/offload/nvme_state_storage.h"

#include <algorithm>
#include <csignal>
#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/core/memory.h"

namespace tessera::offload {

NvmeStateStorage::NvmeStateStorage(SwapDirectory& dir, SwapIo& io, const std::string& name,
                                   const NvmeStateOptions& options)
    : dir_(dir), io_(io), name_(name), options_(options) {
  TESSERA_CHECK(options_.buffer_count >= 2 && options_.sub_group_size > 0);
}

NvmeStateStorage::~NvmeStateStorage() {
  for (Slot& slot : slots_) {
    if (slot.pending < 0) continue;
    try {
      io_.wait(slot.pending);
    } catch (...) {
    }
  }
}

namespace {

// Elements per sub-group: the configured size, no larger than the state, rounded up so every
// sub-group starts on an O_DIRECT boundary.
int64_t group_elems(int64_t numel, int64_t sub_group_size, int64_t alignment) {
  return io::align_up(std::max<int64_t>(1, std::min(numel, sub_group_size)) * 4, alignment) / 4;
}

}  // namespace

int64_t NvmeStateStorage::file_bytes_for(int64_t numel, int arrays, const NvmeStateOptions& options,
                                         int64_t alignment) {
  if (numel == 0) return 0;
  const int64_t group = group_elems(numel, options.sub_group_size, alignment);
  return (numel + group - 1) / group * group * 4 * arrays;
}

int64_t NvmeStateStorage::buffer_bytes_for(int64_t numel, int arrays,
                                           const NvmeStateOptions& options, int64_t alignment) {
  if (numel == 0) return 0;
  return options.buffer_count * group_elems(numel, options.sub_group_size, alignment) * 4 * arrays;
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
  slot_bytes_ = group_ * 4 * arrays_;
  // The buffers are allocated and touched whole: buffers larger than the host's memory (with
  // those of the run's other ranks there) can never run, and would end in the kernel's OOM kill
  // rather than an error (DeepSpeed's default sub_group_size of 1e9 elements makes 12 GB buffers
  // of master weights and Adam's moments). Not checked where the host's memory is unknown.
  const double host = host_memory_bytes();
  const double needed = static_cast<double>(buffer_bytes()) * options_.ranks_on_host;
  if (host > 0 && needed > host) {
    char text[400];
    std::snprintf(text, sizeof(text),
                  "offload_optimizer: %d buffers of a sub-group (%lld elements x %d fp32 arrays) "
                  "need %.1f GB of host memory%s, more than this host's %.1f GB: lower "
                  "zero_optimization.sub_group_size (--offload-sub-group-size) or "
                  "offload_optimizer.buffer_count (--offload-buffer-count)",
                  options_.buffer_count, static_cast<long long>(group_), arrays_, needed / 1e9,
                  options_.ranks_on_host > 1
                      ? (" for the " + std::to_string(options_.ranks_on_host) + " ranks there")
                            .c_str()
                      : "",
                  host / 1e9);
    throw Error(text);
  }
  dir_.check_space(file_bytes(), "the optimizer's swap file");
  file_ = io::DirectFile::create(dir_.file(name_), file_bytes());
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
  if (slot.pending < 0) return;
  const io::AsyncIo::Ticket ticket = slot.pending;
  slot.pending = -1;
  slot.writing = false;
  slot.writing_group = -1;
  io_.wait(ticket);
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

void NvmeStateStorage::start_read(int s, int64_t group) {
  Slot& slot = slots_[s];
  slot.group = group;
  // A sub-group never written (fast_init) is produced by the initialiser instead.
  if (written_[group])
    slot.pending = io_.read(file_, slot.buffer.data(), io_bytes_of(group), offset_of(group));
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
    start_read(free, g);
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
        start_read(s, g);
      }
      next_read = std::max(next_read, g + 1);
      if (options_.pipeline_read)
        for (; next_read < sub_groups_; ++next_read) {
          if (slot_of(next_read) >= 0) continue;  // read ahead already (prefetch())
          const int f = free_slot(true);
          if (f < 0) break;
          start_read(f, next_read);
        }
      finish(s);
      Slot& slot = slots_[s];
      const Window w = window_of(slot);
      if (!written_[g]) init_(w);
      fn(w);
      if (access == optim::StateAccess::kReadWrite) {
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
    }
  } catch (...) {
    // No buffer may be reused (or freed) under a request still in flight; the first error is
    // the one reported.
    for (Slot& slot : slots_) {
      if (slot.pending >= 0) {
        try {
          io_.wait(slot.pending);
        } catch (...) {
        }
      }
      slot = Slot{std::move(slot.buffer)};
    }
    throw;
  }
}

}  // namespace tessera::offload
