// Where ZeRO 3 keeps the owned parts of its sharded units between uses when they are not kept in
// memory (parameter offload): the interface Zero3Params (zero3_params.h) drives, implemented on
// NVMe by offload::ParamSwap (offload/param_swap.h). Its own header so that distributed/ depends
// on the contract only, as the optimizer on its StateStorage.
//
// The contract. initialize() once, with the flat parameter buffer and each unit's owned part.
// A swapped part is then either in memory (its values in their place in the buffer) or not (its
// pages given back, reading as zeros; the store holds its values). wait_read(u) brings unit u's
// part into memory; start_read(u) starts that ahead of time; release(u) gives a part in memory
// back without saving it (the store's copy is current: nothing changed it since it was read);
// cancel_reads() forgets the reads started, before the parts change; write_out_through(e) saves
// the swapped parts ending at or before flat element e (as the optimizer's step passes them) and
// gives them back, write_out_all() does so for every part not saved yet (after the optimizer
// wrote them all) and waits for the writes. A store may keep some parts in memory for good
// (swapped(u) false): nothing of theirs ever moves. Not thread-safe: the training thread calls
// everything.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::distributed {

class PartSwap {
 public:
  // [begin, end) elements of the flat buffer; empty: nothing of that unit is swapped.
  using Range = std::pair<int64_t, int64_t>;

  virtual ~PartSwap() = default;
  // `values` (the flat parameter buffer) is kept by reference: it must outlive the store and
  // never move. `parts[u]`: unit u's owned part (disjoint ranges). Moves nothing.
  virtual void initialize(Tensor& values, std::vector<Range> parts) = 0;
  virtual bool swapped(int unit) const = 0;
  // Returns false when the store could not start all of it now (a caller reading ahead along
  // its units stops there); true when it did, or there is nothing to start.
  virtual bool start_read(int unit) = 0;
  // Returns once unit u's part is in memory (at once when it is, or is not swapped).
  virtual void wait_read(int unit) = 0;
  virtual void release(int unit) = 0;
  virtual void cancel_reads() = 0;
  virtual void write_out_through(int64_t flat_end) = 0;
  virtual void write_out_all() = 0;
};

}  // namespace tessera::distributed
