#include "tessera/model/shard.h"

#include <string>

#include "tessera/core/error.h"

namespace tessera::model {
namespace {

std::vector<TpSection> sections_of(const Shape& shape, const ShardSpec& spec) {
  TESSERA_CHECK_MSG(spec.tp_dim < static_cast<int>(shape.size()),
                    "tp_dim " + std::to_string(spec.tp_dim) + " of shape " + shape_str(shape));
  if (!spec.sections.empty()) {
    int64_t total = 0;
    for (const TpSection& s : spec.sections) total += s.size;
    TESSERA_CHECK_MSG(total == shape[spec.tp_dim], "sections do not cover " + shape_str(shape));
    return spec.sections;
  }
  return {TpSection{shape[spec.tp_dim], 0}};
}

}  // namespace

std::vector<ShardPiece> tp_pieces(const Shape& global_shape, const ShardSpec& spec, int tp_size,
                                  int tp_rank) {
  TESSERA_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size);
  std::vector<ShardPiece> pieces;
  if (spec.tp_dim < 0) return pieces;
  int64_t global = 0, local = 0;
  for (const TpSection& s : sections_of(global_shape, spec)) {
    const int64_t units = s.units > 0 ? s.units : s.size;
    const int64_t unit_size = s.size / units;
    TESSERA_CHECK(unit_size * units == s.size);
    ShardPiece p;
    if (units % tp_size == 0) {
      p.length = s.size / tp_size;
      p.global_begin = global + tp_rank * p.length;
    } else if (tp_size % units == 0) {
      p.replicas = static_cast<int>(tp_size / units);
      p.replica_rank = tp_rank % p.replicas;
      p.length = unit_size;
      p.global_begin = global + (tp_rank / p.replicas) * unit_size;
    } else {
      throw Error("a section of " + std::to_string(units) + " units (of shape " +
                  shape_str(global_shape) + ") cannot be split across " +
                  std::to_string(tp_size) + " tensor-parallel ranks");
    }
    p.local_begin = local;
    local += p.length;
    global += s.size;
    pieces.push_back(p);
  }
  return pieces;
}

Shape tp_local_shape(const Shape& global_shape, const ShardSpec& spec, int tp_size) {
  Shape local = global_shape;
  if (spec.tp_dim < 0) return local;
  int64_t extent = 0;
  for (const ShardPiece& p : tp_pieces(global_shape, spec, tp_size, 0)) extent += p.length;
  local[spec.tp_dim] = extent;
  return local;
}

}  // namespace tessera::model
