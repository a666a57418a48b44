// How a parameter's global tensor is split across the tensor-parallel (TP) group: pure index
// arithmetic, no processes. Model code declares a ShardSpec per parameter; initialisation,
// gradient reduction, the gradient norm and the gathered export all read the pieces below, so
// they agree on which global elements a rank holds.
//
// The split dimension is cut into consecutive *sections* (GPT-2's fused c_attn weight has three:
// query, key and value rows), and each section is dealt out across the T ranks on its own, in
// whole *units* (attention heads; a unit is one element when the section has no structure):
//   - units divisible by T: rank r takes units [r*U/T, (r+1)*U/T) of the section;
//   - T divisible by units (fewer key/value heads than ranks): rank r takes unit r*U/T, so each
//     unit is replicated on T/U neighbouring ranks (a "replica group");
//   - otherwise the split is impossible (tessera::Error; the config check names the flag first).
// A rank's shard is its pieces of every section, concatenated in section order, with the other
// dimension whole. Every rank's shard has the same shape.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::model {

// A run of the split dimension that is dealt out across TP on its own.
struct TpSection {
  int64_t size = 0;   // extent along the split dimension
  int64_t units = 0;  // indivisible units in it (heads); 0 means `size` (element granularity)
};

// How a parameter's global tensor is split across TP. ZeRO partitioning is not here: it
// belongs to the optimizer's flat buffers.
struct ShardSpec {
  int tp_dim = -1;                  // dim split over TP; -1 = replicated across TP
  std::vector<TpSection> sections;  // along tp_dim; empty = one section of the whole dim
  int64_t vocab_rows = 0;           // real (unpadded) rows when dim 0 is a padded vocabulary
  bool expert = false;              // lives in the expert grid instead of the dense one

  // Split along `dim`, in `sections` (none: the whole dim, element granularity).
  static ShardSpec split(int dim, std::vector<TpSection> sections = {}) {
    ShardSpec s;
    s.tp_dim = dim;
    s.sections = std::move(sections);
    return s;
  }
  // A padded vocabulary (rows) split across TP, `real_rows` of them real.
  static ShardSpec vocab(int64_t real_rows) {
    ShardSpec s = split(0);
    s.vocab_rows = real_rows;
    return s;
  }
};

// One contiguous run of a rank's shard along the split dimension.
struct ShardPiece {
  int64_t global_begin = 0;  // first index along tp_dim in the global tensor
  int64_t local_begin = 0;   // first index along tp_dim in this rank's shard
  int64_t length = 0;
  int replicas = 1;          // ranks holding this same piece (> 1 only for replicated units)
  int replica_rank = 0;      // this rank's index among them, in [0, replicas)
};

// The pieces of rank `tp_rank` of `tp_size` in local order. Replicated parameters (tp_dim < 0)
// have no pieces. Throws tessera::Error when a section cannot be split (see above).
std::vector<ShardPiece> tp_pieces(const Shape& global_shape, const ShardSpec& spec, int tp_size,
                                  int tp_rank);
// The shape of one rank's shard (the same on every rank).
Shape tp_local_shape(const Shape& global_shape, const ShardSpec& spec, int tp_size);

// Units of a section each of `ranks` ranks holds under the rule above: units / ranks, or one (a
// replica) when there are fewer units than ranks. Key/value groups split over TP, or over the
// ranks of an attention head split (context parallelism's all-to-all), follow it.
inline int units_per_rank(int units, int ranks) { return units % ranks == 0 ? units / ranks : 1; }

}  // namespace tessera::model
