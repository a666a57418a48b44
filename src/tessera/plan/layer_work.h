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

// A collective one rank waits for, over its group of `group` (the mesh's), or over `ranks` of
// it (a subgroup: the all-to-all of hierarchical context parallelism; a ring's neighbour
// exchange, 2). `behind_attention`: a ring step's transfer, which the communication thread runs
// while the attention kernels compute the block in hand (context/block_attention.h), so they hide
// it by the link's overlap share (plan/machine.h Links::overlap), up to their own time.
struct CommWork {
  CollectiveKind kind;
  comm::GroupKind group;
  double bytes = 0;  // the whole buffer (LinkRate's convention)
  int ranks = 0;     // 0: the whole group
  bool behind_attention = false;
};

// What one pass (a forward, a backward, a recomputation) runs, in order: its kernels and the
// collectives it waits for.
struct PassWork {
  std::vector<KernelWork> kernels;
  std::vector<CommWork> comms;
  void append(const PassWork& other);
};

// One micro-batch of one dense transformer layer on this rank: forward, and backward without
// recomputation (recompute_work adds what recomputation reruns); `attention_core`: what selective
// recomputation reruns, the attention core's forward with context parallelism's exchanges less
// the q/k/v all-to-all (the core reruns on the head-split q/k/v it saved).
//
// Under context parallelism (r.cp > 1) the core is priced as `layer`'s communication type runs it
// (docs/context_parallel.md, the bytes per layer checked by dist.context_parallel): every rank
// does 1/CP of the sequence's causal attention (the load-balanced split), at the attention rate
// of the block it computes; `p2p` sends its key/value block CP - 1 times round the ring forward,
// and in backward again, each behind the block in hand, then the dK/dV accumulators (fp32) CP
// times, each waited for after its block; `all_gather` gathers the key/value blocks (again in
// backward) and reduce-scatters dK/dV; `a2a` exchanges q/k/v and the output (their gradients in
// backward) within the group and runs whole sequences of 1/CP of the heads; `a2a+p2p` does the
// all-to-all within groups of r.cp_a2a and the ring across them.
struct LayerWork {
  PassWork forward, backward, attention_core;
};
// `layer`: the layer's index in the model (its context-parallel type, r.cp_types).
LayerWork layer_work(const model::ModelConfig& cfg, const train::RankLayout& r, int layer);

// What recomputing one layer reruns in backward under `r`'s policy: the layer's forward (full),
// LayerWork::attention_core (selective), nothing otherwise.
PassWork recompute_work(const train::RankLayout& r, const LayerWork& layer);

// The embeddings' forward and backward (model chunk 0) and the head's step (the last model
// chunk: final norm, output layer and loss, all run when its backward starts).
LayerWork embedding_work(const model::ModelConfig& cfg, const train::RankLayout& r);
PassWork head_work(const model::ModelConfig& cfg, const train::RankLayout& r);

}  // namespace tessera::plan
