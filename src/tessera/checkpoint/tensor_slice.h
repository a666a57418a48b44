// Where a rank's part of a canonical tensor sits in the global tensor: the geometry every
// checkpoint file records and every load intersects (DESIGN.md "Checkpoints").
//
// A rank holds a tensor-parallel shard of each parameter (model/shard.h: pieces along one split
// dimension, the local shape), and of that shard, under a sharded optimizer (ZeRO >= 1), only a
// flat range of elements in row-major order; parameters straddle ZeRO partitions, so a flat
// range is the natural unit, not a box. A TensorSlice is exactly that pair. Two slices of the
// same tensor, saved under one layout and needed under another, meet through `runs()`: both
// become lists of runs that are contiguous in the global tensor and in the slice's packed data,
// and copying is a merge of two sorted lists.
//
// The global shape is the canonical one (a padded vocabulary's real rows only: padding depends on
// the tensor-parallel size), so elements of padded rows belong to no run: they are neither saved
// nor loaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tessera/model/parameter.h"

namespace tessera::checkpoint {

// One run of the split dimension: local indices [local_begin, local_begin + length) of the shard
// are global indices [global_begin, ...).
struct SlicePiece {
  int64_t global_begin = 0, local_begin = 0, length = 0;
};

struct TensorSlice {
  std::vector<int64_t> global_shape;  // canonical: real vocabulary rows only
  std::vector<int64_t> local_shape;   // the shard as held (padded rows included)
  int tp_dim = -1;                    // -1: the shard is the whole tensor
  std::vector<SlicePiece> pieces;     // along tp_dim, in local order (empty when tp_dim < 0)
  int64_t flat_begin = 0, flat_end = 0;  // elements of the shard, row-major, [begin, end)

  int64_t numel() const { return flat_end - flat_begin; }

  // The slice of parameter p held by this rank: its shard's elements [begin, end) (shard-local
  // flat indices).
  static TensorSlice of(const model::Parameter& p, int64_t begin, int64_t end);
  // The whole of a tensor of canonical `shape`, as one process holds it.
  static TensorSlice whole(const std::vector<int64_t>& shape);

  nlohmann::json to_json() const;
  // Throws tessera::Error naming `where` when the description is malformed or inconsistent
  // (pieces outside the shapes, a flat range outside the shard).
  static TensorSlice from_json(const nlohmann::json& j, const std::string& where);
  // Checks that the shard described fits `global_shape` (same rank; the dimensions not split
  // equal; a column split only in 2-D); tessera::Error naming `where` otherwise. Pieces may run
  // past the real rows: those are padding.
  void check_fits_global(const std::string& where) const;
};

// Elements contiguous both in the global tensor (row-major, canonical shape) and in a slice's
// packed data (element `packed` is the slice's flat_begin + packed).
struct Run {
  int64_t global = 0, packed = 0, length = 0;
};

// The slice as runs sorted by global offset; elements of padded rows are left out.
std::vector<Run> runs(const TensorSlice& s);

// Copies every element `src` (runs of a saved slice, its packed data) shares with `dst` (runs of
// a needed slice) into dst's packed data; returns the number of elements copied. Both lists
// sorted by global offset (as runs() returns them). `elem_bytes` is the element size.
int64_t copy_overlap(const std::vector<Run>& src, const void* src_data, const std::vector<Run>& dst,
                     void* dst_data, size_t elem_bytes);

}  // namespace tessera::checkpoint
