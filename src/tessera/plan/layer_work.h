// The work one rank does for one micro-batch, as the step-time model prices it: the kernels each
// module runs (kind, size, amount) and the collectives it waits for, counted by hand from the
// modules (model/transformer_layer.cc, attention.cc, mlp.cc, norm.cc, gpt_model.cc's embedding and
// head), as the activations (model/activation_memory.h) and the kernels' scratch
// (model/scratch_memory.h) are. A machine description (plan/machine.h) turns the amounts into
// seconds.
//
// Units: GEMMs count 2 FLOPs per multiply-add, sized by the product's smallest dimension;
// causal attention counts its forward's FLOPs (2 products over half the T x T scores) for both
// its forward and its backward kind, sized by the sequence length; every other kernel counts
// elements, sized by the elements of one call.
#pragma once

#include <vector>

#include "tessera/comm/parallel_state.h"
#include "tessera/core/dtype.h"
#include "tessera/model/config.h"
#include "tessera/plan/machine.h"
#include "tessera/train/memory_report.h"

namespace tessera::plan {

// `amount` units of work of `kind` on `dtype` (FLOPs for products and attention, elements
// otherwise) at `size` (the machine's rate curve is read at it).
struct KernelWork {
  KernelKind kind;
  DType dtype;
  double size = 0, amount = 0;
};

// A collective one rank waits for, over its group of `group` (the mesh's).
struct CommWork {
  CollectiveKind kind;
  comm::GroupKind group;
  double bytes = 0;  // the whole buffer (LinkRate's convention)
};

// What one pass (a forward, a backward, a recomputation) runs, in order: its kernels and the
// collectives it waits for.
struct PassWork {
  std::vector<KernelWork> kernels;
  std::vector<CommWork> comms;
  void append(const PassWork& other);
};

// One micro-batch of one dense transformer layer on this rank: forward, and backward without
// recomputation (recompute_work adds what recomputation reruns).
struct LayerWork {
  PassWork forward, backward;
};
LayerWork layer_work(const model::ModelConfig& cfg, const train::RankLayout& r);

// What recomputing one layer reruns in backward under `r`'s policy: the layer's forward (full),
// the attention core's forward (selective), nothing otherwise.
PassWork recompute_work(const model::ModelConfig& cfg, const train::RankLayout& r,
                        const LayerWork& layer);

// The embeddings' forward and backward (model chunk 0) and the head's step (the last model
// chunk: final norm, output layer and loss, all run when its backward starts).
LayerWork embedding_work(const model::ModelConfig& cfg, const train::RankLayout& r);
PassWork head_work(const model::ModelConfig& cfg, const train::RankLayout& r);

}  // namespace tessera::plan
