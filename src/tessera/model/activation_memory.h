// The analytic count of the activation bytes one transformer layer keeps between its forward and
// its backward, per micro-batch, under each recomputation policy: counted by hand from what the
// layer saves (model/transformer_layer.h Saved), not from the code that saves it, so tests and
// benchmarks can hold the memory accountant's measurement against it (and a planner can predict
// memory before a run).
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/model/config.h"
#include "tessera/model/chunk_runner.h"

namespace tessera::model {

// Bytes kept by one layer for N tokens (this rank's rows) with activations of `dtype`, for the
// granularity of `policy` (full: the layer's input only, as if every layer started its own
// recompute group). No dropout (its masks are regenerated, never stored) and no tensor
// parallelism (one rank holds every head).
double layer_activation_bytes(const ModelConfig& cfg, int64_t N, DType dtype,
                              RecomputePolicy::Granularity granularity);

}  // namespace tessera::model
