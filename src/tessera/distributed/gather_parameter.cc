#include "tessera/distributed/gather_parameter.h"

#include <algorithm>

namespace tessera::distributed {

Tensor gather_parameter(const model::Parameter& p, const Tensor& local,
                        const parallel::TensorParallel& tp) {
  TESSERA_CHECK(local.dtype() == DType::kF32 && local.numel() == p.numel());
  if (p.shard.tp_dim < 0 || tp.size() == 1) return local;
  const int n = tp.size();
  Tensor shards = Tensor::empty({n * p.numel()}, DType::kF32, MemoryCategory::kComm);
  tp.group()->all_gather(local.view({p.numel()}), shards).wait();

  Tensor global = Tensor::empty(p.global_shape, DType::kF32, MemoryCategory::kOther);
  // As (rows, cols) with a vector as one row; the split dimension is rows or columns.
  const bool vector = p.global_shape.size() == 1;
  const bool split_rows = p.shard.tp_dim == 0 && !vector;
  const int64_t rows = vector ? 1 : p.global_shape[0];
  const int64_t gcols = p.global_shape.back(), lcols = p.local_shape.back();
  float* dst = global.data<float>();
  for (int r = 0; r < n; ++r) {
    const float* src = shards.data<float>() + r * p.numel();
    for (const model::ShardPiece& piece : model::tp_pieces(p.global_shape, p.shard, n, r)) {
      if (split_rows) {
        std::copy(src + piece.local_begin * lcols, src + (piece.local_begin + piece.length) * lcols,
                  dst + piece.global_begin * gcols);
      } else {
        for (int64_t row = 0; row < rows; ++row)
          std::copy(src + row * lcols + piece.local_begin,
                    src + row * lcols + piece.local_begin + piece.length,
                    dst + row * gcols + piece.global_begin);
      }
    }
  }
  return global;
}

}  // namespace tessera::distributed
