// The analytic count of the activation bytes one transformer layer keeps between its forward and
// its backward, per micro-batch, under each recomputation policy, and of the buffers its backward
// holds at its peak: counted by hand from what the layer saves (model/transformer_layer.h Saved)
// and allocates in backward, not from the code that saves it, so tests and the memory report can
// hold the memory accountant's measurement against it (and a planner can predict memory before a
// run).
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/model/chunk_runner.h"
#include "tessera/model/config.h"

namespace tessera::model {

// Bytes kept by one dense layer for N tokens of a micro-batch (the whole sequence's, before any
// sequence-parallel split) with activations of `dtype`, for the granularity of `policy` (full:
// the layer's input only, as if every layer started its own recompute group), on one of `tp`
// tensor-parallel ranks (`sequence_parallel`: the residual stream's rows split over them; the
// column-parallel layers' inputs are kept gathered, whole). No dropout (its masks are
// regenerated, never stored), no context parallelism.
double layer_activation_bytes(const ModelConfig& cfg, int64_t N, DType dtype,
                              RecomputePolicy::Granularity granularity, int tp = 1,
                              bool sequence_parallel = false);

// The buffers a dense layer's backward holds at once at its largest, beside what the layers keep:
// in the MLP's backward, the incoming gradient (residual rows), the activation's and the up
// projection's gradients (this rank's columns) and the input gradient before its reduction
// (whole rows; under sequence parallelism also the reduced slice), and with hidden dropout the
// incoming gradient through the dropout (a new buffer of residual rows).
double layer_backward_working_bytes(const ModelConfig& cfg, int64_t N, DType dtype, int tp = 1,
                                    bool sequence_parallel = false);

}  // namespace tessera::model
