// Optimizer state on NVMe (DeepSpeed's ZeRO-Infinity offload_optimizer with device "nvme"): a
// StateStorage (optim/state_storage.h) whose arrays live in one swap file of this rank's
// partition and pass through a few aligned buffers, one sub-group of `sub_group_size` elements
// at a time (DeepSpeed's sub_group_size, the swap unit).
//
// File layout: sub-group i (elements [i*G, min(n, (i+1)*G)) of every array, G = the sub-group
// size rounded up to the O_DIRECT alignment) is one contiguous block at offset i * arrays * G * 4:
// array 0's elements, then array 1's, each padded to the alignment. One request moves a whole
// sub-group.
//
// Buffers: `buffer_count` (>= 2) buffers of one sub-group each (all its arrays: DeepSpeed counts
// one buffer per tensor; here a buffer holds a sub-group's tensors together). A visit reads
// sub-group i, calls the visitor, writes it back (kReadWrite). pipeline_read reads the next
// sub-groups ahead into free buffers while the visitor runs; pipeline_write lets writes complete
// in the background (a buffer is reused once its write is done): with both, sub-group i+1 is read
// while i is updated and i-1 written, DeepSpeed's pipelined swapper.
//
// Gradients (NvmeStateOptions::gradients, on in training): the step's fp32 gradients of the
// partition are held too, in a second file `<name>.gradients` of the same sub-group geometry, as
// DeepSpeed's swapper writes them at the accumulation boundary: store_gradients() copies each
// piece into chunk buffers (`gradient_chunk_bytes`, aligned) written as soon as they are full,
// pieces arriving in any order; a deferred piece counts as arrived (its chunk is written without
// it) and is written into the file when it comes, through the aligned blocks around it (read,
// patched, written back); a step's visit (kStep) reads sub-group i's gradients into its
// buffer beside its state, ahead with the state when pipeline_read (not by prefetch(): the
// gradients are written after it). The gradients are read, never written back.
//
// fast_init: the initial state is not written at construction; a sub-group never written is
// produced by the initialiser when first visited (one full write and read fewer). Errors of the
// I/O (tessera::Error naming the file, offset and errno) propagate from the visit; buffers are
// not reused until every request on them has completed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/io/aligned_buffer.h"
#include "tessera/io/direct_file.h"
#include "tessera/offload/swap_directory.h"
#include "tessera/offload/swap_io.h"
#include "tessera/optim/state_storage.h"

namespace tessera::offload {

struct NvmeStateOptions {
  int64_t sub_group_size = 1'000'000'000;  // elements (DeepSpeed's default 1e9)
  int buffer_count = 4;
  bool pipeline_read = false, pipeline_write = false;
  bool fast_init = false;
  int ranks_on_host = 1;  // the run's ranks on this host, whose buffers share its memory
  bool gradients = false;  // hold the step's gradients too (see above)
  // Their write unit, rounded up to the alignment, no larger than the gradient file. With
  // kGradientChunks of them in flight: 1 MiB chunks (4 MiB in flight) wrote the gradients of a
  // 0.37 B model at 0.3 GB/s here, stalling backward 19x; 8 MiB chunks keep the disk busy.
  int64_t gradient_chunk_bytes = 8 << 20;
};

class NvmeStateStorage final : public optim::StateStorage {
 public:
  // The swap file is `name` in `dir`; `io` is the rank's engine. Both must outlive the storage.
  NvmeStateStorage(SwapDirectory& dir, SwapIo& io, const std::string& name,
                   const NvmeStateOptions& options);
  // Waits for requests still in flight (their errors are dropped: the run is ending).
  ~NvmeStateStorage() override;

  void initialize(int64_t numel, int arrays, const Initializer& init) override;
  void for_each_window(optim::StateAccess access,
                       const std::function<void(const Window&)>& fn) override;
  int64_t numel() const override { return numel_; }
  bool resident() const override { return false; }
  bool holds_gradients() const override { return options_.gradients; }
  void store_gradients(int64_t packed_begin, const float* grads, int64_t count) override;
  void defer_gradients(int64_t packed_begin, int64_t count) override;
  void gradients_stored() override;

  static constexpr int kGradientChunks = 8;  // in flight at once (more only while pieces have gaps)

  // Starts reading the first sub-groups into the free buffers (all but one; none whose write
  // is still in flight): called when the state will not change before the next visit (the
  // trainer, before the forward pass), so the step finds them read while the model computed.
  // Writes of the last visit go on meanwhile.
  void prefetch();

  // Test hook: the process kills itself (SIGKILL) once `windows` windows of the next
  // read-write visit were written back, the rest not: a crash in the middle of a step.
  void kill_after_windows(int64_t windows) { kill_after_ = windows; }

  int64_t sub_groups() const { return sub_groups_; }
  int64_t sub_group_elems() const { return group_; }
  // Bytes of the swap file and of the buffers (for the memory report and the space check).
  int64_t file_bytes() const { return sub_groups_ * slot_bytes_; }
  int64_t buffer_bytes() const {
    return options_.buffer_count * slot_bytes_ +
           static_cast<int64_t>(std::max<size_t>(kGradientChunks, chunks_.size())) * chunk_bytes_;
  }

  // The bytes the swap files of `numel` elements x `arrays` (and the gradients) will take with
  // `options` on a file system of O_DIRECT alignment `alignment` (for the up-front space check).
  static int64_t file_bytes_for(int64_t numel, int arrays, const NvmeStateOptions& options,
                                int64_t alignment);
  // The bytes its buffers will take (buffer_bytes() of such a storage): for a prediction of the
  // run's memory before anything exists (train/rank_layout.h).
  static int64_t buffer_bytes_for(int64_t numel, int arrays, const NvmeStateOptions& options,
                                  int64_t alignment);

 private:
  struct Slot {
    io::AlignedBuffer buffer;          // the state's arrays, then (gradients) the gradients
    int64_t group = -1;                // the sub-group it holds (or is reading), -1: none
    io::AsyncIo::Ticket pending = -1;  // an in-flight read or write on it
    bool writing = false;
    int64_t writing_group = -1;             // the sub-group its in-flight write holds
    io::AsyncIo::Ticket grad_pending = -1;  // the read of the group's gradients
    bool has_grads = false;                 // they are read (or being read) into it
  };
  // A chunk of the gradient file being filled (index >= 0) or written (pending >= 0).
  struct GradientChunk {
    io::AlignedBuffer buffer;
    int64_t index = -1, filled = 0;
    io::AsyncIo::Ticket pending = -1;
  };
  int64_t length_of(int64_t group) const;  // elements of sub-group `group`
  int64_t padded_of(int64_t group) const;  // its per-array stride in the slot, aligned
  int64_t io_bytes_of(int64_t group) const { return padded_of(group) * arrays_ * 4; }
  int64_t offset_of(int64_t group) const { return group * state_bytes_; }
  Window window_of(Slot& slot);
  // A slot with no request in flight, waiting for the oldest write if all are busy; -1 when
  // every slot holds a sub-group still to be visited (reads ahead).
  int free_slot(bool may_wait);
  void start_read(int slot, int64_t group, bool with_grads);
  void start_gradient_read(int slot);
  GradientChunk& chunk_for(int64_t index);  // the chunk being filled, or a free one
  // Puts bytes [begin, end) of the gradient file into their chunks (`src` null: a deferred
  // piece, counted only), writing each chunk once complete.
  void fill_chunks(int64_t begin, int64_t end, const char* src);
  // Writes a deferred piece into the file through the aligned blocks around it.
  void patch_gradients(int64_t begin, int64_t end, const char* src);
  void wait_all_requests();                 // errors dropped: for destruction and unwinding
  int slot_of(int64_t group) const;  // the slot holding (or reading) `group`, or -1
  void finish(int slot);             // waits for the slot's requests, if any
  void wait_for(io::AsyncIo::Ticket& ticket);  // if any (>= 0); it is -1 after, even on an error
  void wait_gradient_writes();

  SwapDirectory& dir_;
  SwapIo& io_;
  std::string name_;
  NvmeStateOptions options_;
  int64_t numel_ = 0, group_ = 0, sub_groups_ = 0, align_elems_ = 1;
  int64_t state_bytes_ = 0;  // a sub-group's state in the file (its slot in the state file)
  int64_t slot_bytes_ = 0;   // a buffer: the state, and the gradients if held
  int arrays_ = 0;
  io::DirectFile file_;
  std::vector<Slot> slots_;
  io::DirectFile grad_file_;
  int64_t chunk_bytes_ = 0, alignment_ = 0;
  std::vector<GradientChunk> chunks_;
  int64_t grad_bytes_stored_ = 0;  // this step's, so far
  std::vector<std::pair<int64_t, int64_t>> deferred_;  // this step's deferred bytes [begin, end)
  bool grads_ready_ = false;       // every gradient of the coming step is stored
  std::vector<bool> written_;  // sub-groups holding state on disk (fast_init: not yet)
  Initializer init_;
  int64_t kill_after_ = -1;
};

}  // namespace tessera::offload
