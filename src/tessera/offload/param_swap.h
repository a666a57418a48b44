// ZeRO 3 parameters on NVMe (DeepSpeed's ZeRO-Infinity offload_param with device "nvme"): the
// parts of the flat parameter buffer this rank owns (its part of every sharded model unit,
// distributed/zero3_params.h) live in one swap file between uses; a part is read back just
// before its unit is gathered and given back (its pages released) after, and written out once
// per step, as soon as the optimizer's step has updated it (write_out_through). Values move in the
// compute dtype, bit for bit. The contract of the calls is distributed::PartSwap's
// (distributed/part_swap.h); below, what the NVMe store adds to it.
//
// Which parts are swapped: every part handed to initialize(), except the longest run of them in
// flat order that fits in `max_in_cpu` elements (DeepSpeed's offload_param.max_in_cpu): those
// stay in memory for the whole run and are never written. The default 1e9 keeps every part of a
// model with fewer elements per rank in memory, as DeepSpeed's does; 0 swaps everything.
//
// File layout: each swapped part is cut into pieces of at most `buffer_size` elements (the last
// one shorter); every piece starts at an O_DIRECT-aligned offset of the file, one after the
// other in flat order.
//
// Buffers: `buffer_count` aligned buffers of one piece each (buffer_size elements, or the largest
// swapped part when smaller). Direct I/O needs an aligned address and length, which a part's
// place in the flat buffer does not have, so every transfer passes through a buffer: a read
// lands in one and is copied into the flat buffer by wait_read(); a write copies the part out
// first. At most buffer_count pieces are therefore in transit at once: that is the bound on the
// reads ahead (DeepSpeed: buffer_count buffers of buffer_size elements). A read ahead that
// completed keeps its buffer until its unit is waited for; a wait that needs a buffer while all
// hold reads ahead of other units cancels the latest of them (it is read again later).
//
// Not thread-safe: the training thread calls everything (the I/O runs in SwapIo's engine). I/O
// errors are tessera::Error naming the swap file, the offset and the errno (io/async_io.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/distributed/part_swap.h"
#include "tessera/io/aligned_buffer.h"
#include "tessera/io/direct_file.h"
#include "tessera/offload/swap_directory.h"
#include "tessera/offload/swap_io.h"

namespace tessera::offload {

struct ParamSwapOptions {
  int buffer_count = 5;                // >= 2 (offload_param.buffer_count)
  int64_t buffer_size = 100'000'000;   // elements per buffer, > 0 (offload_param.buffer_size)
  int64_t max_in_cpu = 1'000'000'000;  // elements of parts kept in memory, >= 0
};

class ParamSwap final : public distributed::PartSwap {
 public:
  // The swap file is `name` in `dir`; `io` is the rank's engine. Both must outlive the swap.
  ParamSwap(SwapDirectory& dir, SwapIo& io, const std::string& name,
            const ParamSwapOptions& options);
  // Waits for requests still in flight (their errors are dropped: the run is ending).
  ~ParamSwap() override;
  ParamSwap(const ParamSwap&) = delete;
  ParamSwap& operator=(const ParamSwap&) = delete;

  // Chooses the parts kept in memory (max_in_cpu), checks the free space and creates the swap
  // file; writes nothing (write_out_all() does). tessera::Error when the file system lacks the
  // space.
  void initialize(Tensor& values, std::vector<Range> parts) override;
  // False for empty parts and those kept by max_in_cpu.
  bool swapped(int unit) const override { return unit_part_[unit] >= 0; }
  // Starts the reads of the part's pieces not yet on their way, into free buffers; false when a
  // piece found no free buffer.
  bool start_read(int unit) override;
  // Reads what start_read() did not start (cancelling the latest read ahead if every buffer
  // holds one), copying each piece into place as it arrives. Blocks on the I/O.
  void wait_read(int unit) override;
  // Gives the part's pages back (it reads as zeros); writes nothing.
  void release(int unit) override;
  // Waits for every read in flight and forgets what it read.
  void cancel_reads() override;
  // Writes the swapped parts ending at or before `flat_end` that this step has not written yet
  // (in flat order) out through the buffers, releasing each part's pages once it is copied;
  // the writes complete in the background. Cancels reads first (until the step's first part is
  // written). `flat_end` never decreases within a step (checked).
  void write_out_through(int64_t flat_end) override;
  // Writes every swapped part out that write_out_through() has not, then waits for the writes.
  void write_out_all() override;

  // What initialize() will keep in memory and allocate, from the parts' sizes alone (for a
  // prediction of the run's memory before anything exists, train/rank_layout.h): the elements
  // of the parts max_in_cpu keeps (`part_elems` in flat order, 0 for a unit not swapped), and
  // the bytes of the buffers for elements of `elem_bytes` on a file system of O_DIRECT alignment
  // `alignment` (0 when nothing is swapped), and which parts are kept.
  struct Sizes {
    int64_t kept_elems = 0, buffer_bytes = 0;
    std::vector<bool> kept;  // per part: kept in memory (an empty part: false)
  };
  static Sizes sizes_for(const std::vector<int64_t>& part_elems, const ParamSwapOptions& options,
                         int64_t elem_bytes, int64_t alignment);

  // Figures for the log: the swap file's bytes, the buffers' bytes, the units swapped and their
  // elements, and the elements of parts kept in memory (max_in_cpu).
  int64_t file_bytes() const { return file_bytes_; }
  int64_t buffer_bytes() const;
  int swapped_units() const { return static_cast<int>(parts_.size()); }
  int64_t swapped_elems() const;
  int64_t kept_elems() const { return kept_elems_; }

 private:
  struct Piece {
    int64_t begin, end;  // flat elements
    int64_t offset;      // in the file
    int slot = -1;       // the buffer it is being read into (or was read into), -1: none
  };
  struct Part {
    int64_t begin, end;
    int first_piece, pieces;
    bool in_memory = true;  // its values are in the flat buffer
  };
  struct Slot {
    io::AlignedBuffer buffer;
    int piece = -1;                    // the piece read into it, -1: none (free, or writing)
    io::AsyncIo::Ticket pending = -1;  // an in-flight read or write on it
  };
  int64_t io_bytes(const Piece& p) const;
  // Copies the part's pieces into buffers, starts their writes and releases its pages.
  void write_part(Part& part);
  int free_slot() const;  // a slot holding nothing and with nothing in flight, or -1
  void start_piece(int slot, int piece);
  // Waits for the slot's request, if any; the slot keeps its piece.
  void finish(int slot);
  // Waits for and forgets the read in `slot` (its piece is read again when needed).
  void drop_read(int slot);
  // After an error: waits for everything in flight and forgets every read.
  void reset_slots() noexcept;
  uint8_t* flat(int64_t element) const { return base_ + element * elem_bytes_; }

  SwapDirectory& dir_;
  SwapIo& io_;
  std::string name_;
  ParamSwapOptions options_;
  uint8_t* base_ = nullptr;  // the flat buffer
  int64_t elem_bytes_ = 0, alignment_ = 1, file_bytes_ = 0, kept_elems_ = 0;
  std::vector<int> unit_part_;  // per unit: its index in parts_, -1 when not swapped
  std::vector<Part> parts_;     // swapped parts in flat order
  size_t next_out_ = 0;         // the first part this step has not written out yet
  int64_t through_ = 0;         // the step's progress: the last write_out_through's flat_end
  std::vector<Piece> pieces_;
  std::vector<Slot> slots_;
  io::DirectFile file_;
};

}  // namespace tessera::offload
