// The kernels' scratch (MemoryCategory::kOther: GEMM packing and scratchpads, widened copies, the
// norms' partial sums) of one transformer layer's and of the output head's forward and backward,
// planned from the model configuration and the layout (kernels/scratch_plan.h): the products and
// norm backward passes each module runs, with the shapes it runs them at, sized by the kernels'
// own plan functions. Counted by hand from the modules (attention.cc, mlp.cc, moe_layer.cc,
// gpt_model.cc head), as the activations are (activation_memory.h), so the memory report can hold
// the accountant's measurement against it.
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/kernels/scratch_plan.h"
#include "tessera/model/activation_memory.h"
#include "tessera/model/config.h"

namespace tessera::model {

// One layer's step for N tokens of a micro-batch on this rank (its share under context
// parallelism, before any sequence-parallel split), activations of `dtype`, on one of `tp`
// tensor-parallel ranks, products on a team of `threads`. With `moe` an MoE layer (its router's
// fp32 products, its experts' MLPs at the balanced rows of one expert, the shared expert's).
void plan_layer_scratch(kernels::ScratchPlan& plan, const ModelConfig& cfg, int64_t N, DType dtype,
                        int tp, bool sequence_parallel, int threads, const MoeRows* moe = nullptr);

// The head's step: the final norm's backward and the output layer's products (this rank's
// 1/TP of the padded vocabulary).
void plan_head_scratch(kernels::ScratchPlan& plan, const ModelConfig& cfg, int64_t N, DType dtype,
                       int tp, bool sequence_parallel, int threads);

}  // namespace tessera::model
