// Reassembling a parameter's global tensor from the tensor-parallel shards (for exports and
// anything else that needs the whole tensor on one rank).
#pragma once

#include "tessera/core/tensor.h"
#include "tessera/model/parameter.h"
#include "tessera/parallel/tensor_parallel.h"

namespace tessera::distributed {

// `local` is p's shard on this rank (p.local_shape, fp32). Returns the global tensor
// (p.global_shape, fp32) on every rank: an all-gather over TP of the shards, placed by the
// pieces of each rank (model/shard.h). Replicated parameters are returned as is (no
// communication). Collective over tp's group for split parameters.
Tensor gather_parameter(const model::Parameter& p, const Tensor& local,
                        const parallel::TensorParallel& tp);

}  // namespace tessera::distributed
