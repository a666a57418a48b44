#include "tessera/checkpoint/tensor_slice.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::checkpoint {
namespace {

int64_t product(const std::vector<int64_t>& shape, size_t from) {
  int64_t n = 1;
  for (size_t i = from; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// Appends the part of [global, global + length) <-> [local, ...) (shard-flat) that lies in the
// slice's flat range and in the real rows, as a run.
void add_run(const TensorSlice& s, int64_t global, int64_t local, int64_t length,
             int64_t global_limit, std::vector<Run>& out) {
  const int64_t b = std::max(local, s.flat_begin), e = std::min(local + length, s.flat_end);
  if (b >= e) return;
  const int64_t g = global + (b - local);
  const int64_t n = std::min(e - b, global_limit - g);
  if (n > 0) out.push_back({g, b - s.flat_begin, n});
}

}  // namespace

TensorSlice TensorSlice::of(const model::Parameter& p, int64_t begin, int64_t end) {
  TensorSlice s;
  s.global_shape.assign(p.global_shape.begin(), p.global_shape.end());
  if (p.shard.vocab_rows > 0) s.global_shape[0] = p.shard.vocab_rows;
  s.local_shape.assign(p.local_shape.begin(), p.local_shape.end());
  s.tp_dim = p.shard.tp_dim;
  for (const model::ShardPiece& piece : p.pieces)
    s.pieces.push_back({piece.global_begin, piece.local_begin, piece.length});
  if (s.tp_dim < 0) s.pieces.clear();
  s.flat_begin = begin;
  s.flat_end = end;
  return s;
}

TensorSlice TensorSlice::whole(const std::vector<int64_t>& shape) {
  TensorSlice s;
  s.global_shape = shape;
  s.local_shape = shape;
  s.flat_end = product(shape, 0);
  return s;
}

nlohmann::json TensorSlice::to_json() const {
  nlohmann::json pieces_json = nlohmann::json::array();
  for (const SlicePiece& p : pieces)
    pieces_json.push_back({p.global_begin, p.local_begin, p.length});
  return {{"local_shape", local_shape},
          {"tp_dim", tp_dim},
          {"pieces", pieces_json},
          {"flat", {flat_begin, flat_end}}};
}

TensorSlice TensorSlice::from_json(const nlohmann::json& j, const std::string& where) {
  TensorSlice s;
  try {
    s.local_shape = j.at("local_shape").get<std::vector<int64_t>>();
    s.tp_dim = j.at("tp_dim").get<int>();
    for (const auto& p : j.at("pieces"))
      s.pieces.push_back({p.at(0).get<int64_t>(), p.at(1).get<int64_t>(), p.at(2).get<int64_t>()});
    s.flat_begin = j.at("flat").at(0).get<int64_t>();
    s.flat_end = j.at("flat").at(1).get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed slice description (" + e.what() +
                "): expected local_shape, tp_dim, pieces and flat");
  }
  bool ok = s.flat_begin >= 0 && s.flat_begin <= s.flat_end &&
            s.flat_end <= product(s.local_shape, 0) && s.tp_dim >= -1 &&
            s.tp_dim < static_cast<int>(s.local_shape.size()) && s.tp_dim <= 1 &&
            std::all_of(s.local_shape.begin(), s.local_shape.end(),
                        [](int64_t d) { return d >= 0; });
  for (const SlicePiece& p : s.pieces)
    ok = ok && s.tp_dim >= 0 && p.length >= 0 && p.local_begin >= 0 && p.global_begin >= 0 &&
         p.local_begin + p.length <= s.local_shape[s.tp_dim];
  if (!ok) throw Error(where + ": slice description out of range: " + s.to_json().dump());
  return s;
}

void TensorSlice::check_fits_global(const std::string& where) const {
  bool ok = local_shape.size() == global_shape.size() && !local_shape.empty();
  for (size_t d = 0; ok && d < local_shape.size(); ++d)
    ok = static_cast<int>(d) == tp_dim || local_shape[d] == global_shape[d];
  ok = ok && (tp_dim != 1 || global_shape.size() == 2);
  if (!ok)
    throw Error(where + ": a slice of shape " + nlohmann::json(local_shape).dump() +
                " split along dimension " + std::to_string(tp_dim) +
                " does not fit the tensor's shape " + nlohmann::json(global_shape).dump());
}

std::vector<Run> runs(const TensorSlice& s) {
  std::vector<Run> out;
  const std::vector<int64_t>& G = s.global_shape;
  const int64_t global_numel = product(G, 0);
  if (s.tp_dim < 0) {
    // The shard is the tensor (a padded vocabulary is never replicated: its rows are split).
    add_run(s, 0, 0, product(s.local_shape, 0), global_numel, out);
  } else if (s.tp_dim == 0) {
    // Rows split: each piece is a block of whole rows, contiguous on both sides.
    const int64_t row = product(s.local_shape, 1);
    for (const SlicePiece& p : s.pieces)
      add_run(s, p.global_begin * row, p.local_begin * row, p.length * row, global_numel, out);
  } else {
    // Columns split (2-D only): a run per local row and piece, within the slice's rows.
    const int64_t cols = s.local_shape[1], global_cols = G.size() > 1 ? G[1] : 1;
    const int64_t first_row = cols > 0 ? s.flat_begin / cols : 0;
    const int64_t end_row = cols > 0 ? (s.flat_end + cols - 1) / cols : 0;
    for (int64_t r = first_row; r < end_row && r < G[0]; ++r)
      for (const SlicePiece& p : s.pieces)
        add_run(s, r * global_cols + p.global_begin, r * cols + p.local_begin, p.length,
                global_numel, out);
  }
  std::sort(out.begin(), out.end(), [](const Run& a, const Run& b) { return a.global < b.global; });
  return out;
}

int64_t copy_overlap(const std::vector<Run>& src, const void* src_data, const std::vector<Run>& dst,
                     void* dst_data, size_t elem_bytes) {
  const auto* from = static_cast<const char*>(src_data);
  auto* to = static_cast<char*>(dst_data);
  int64_t copied = 0;
  size_t i = 0, j = 0;
  while (i < src.size() && j < dst.size()) {
    const Run& a = src[i];
    const Run& b = dst[j];
    const int64_t lo = std::max(a.global, b.global);
    const int64_t hi = std::min(a.global + a.length, b.global + b.length);
    if (lo < hi) {
      std::memcpy(to + (b.packed + lo - b.global) * elem_bytes,
                  from + (a.packed + lo - a.global) * elem_bytes, (hi - lo) * elem_bytes);
      copied += hi - lo;
    }
    if (a.global + a.length <= b.global + b.length) {
      ++i;
    } else {
      ++j;
    }
  }
  return copied;
}

}  // namespace tessera::checkpoint
