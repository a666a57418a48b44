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

// The rows an MoE block works on, per micro-batch on one rank, with balanced routing (every
// expert chosen equally often: the expectation; a real router's imbalance moves the measured
// figure by the share of rows its busiest rank receives beyond that).
struct MoeRows {
  double permuted = 0;     // the expert-major copies this rank makes of its tokens' choices
  double local = 0;        // the rows its experts compute, after the expert-parallel exchange
  double per_expert = 0;   // the rows of one local expert
  int expert_tp = 1;       // the experts' tensor-parallel size (1: whole)
  bool exchanged = false;  // expert parallelism: rows travel to their experts' ranks and back
};

// Balanced rows for N tokens on a rank of `ep` expert-parallel ranks; `fold_tp` > 1: the experts
// are whole under TP (each TP rank computes 1/fold_tp of the tokens' rows; padding rows go with
// TP rank 0's, counted here: the largest share).
MoeRows balanced_moe_rows(const ModelConfig& cfg, int64_t N, int ep, int expert_tp, int fold_tp);

// Bytes kept by one dense layer for N tokens of a micro-batch (the whole sequence's, before any
// sequence-parallel split) with activations of `dtype`, for the granularity of `policy` (full:
// the layer's input only, as if every layer started its own recompute group), on one of `tp`
// tensor-parallel ranks (`sequence_parallel`: the residual stream's rows split over them, and
// the column-parallel layers keep their inputs as those rows, gathering them again in backward;
// an MoE block keeps its input gathered). No dropout (its masks are
// regenerated, never stored). With `moe` an MoE layer: its block keeps the expert inputs and
// outputs of its rows, each expert's up projection and activation, and the shared expert's, in
// place of the dense MLP's (the router's logits and routing are host vectors, a few bytes per
// token). Under context parallelism N is this rank's tokens; `head_split` > 1: the attention core
// runs in a head split over that many ranks (Ulysses' all-to-all: a2a over the CP group, a2a+p2p
// within its groups), which keeps q, k, v in the head split (key/value groups replicated when
// fewer than the ranks) and the core's output in both splits.
double layer_activation_bytes(const ModelConfig& cfg, int64_t N, DType dtype,
                              RecomputePolicy::Granularity granularity, int tp = 1,
                              bool sequence_parallel = false, const MoeRows* moe = nullptr,
                              int head_split = 1);

// The buffers a dense layer's backward holds at once at its largest, beside what the layers keep:
// in the MLP's backward, the incoming gradient (residual rows), the activation's and the up
// projection's gradients (this rank's columns) and the input gradient before its reduction
// (whole rows; under sequence parallelism also the input gathered again), and with hidden dropout
// the incoming gradient through the dropout (a new buffer of residual rows). With `moe`, the MoE
// block's backward (moe_layer.cc, in its order): the incoming gradient (gathered under SP), the
// input gradient, fp32 copies of the input and the router weight (16-bit activations), the rows'
// gradient, then the larger of the experts' phase (the exchanged rows, the experts' input gradients
// and one expert's MLP backward), the combine (the rows back) and the shared expert's phase. The
// attention's phase, when larger (a narrow MLP): the MLP's input gradient and the residual's (with
// its dropout copy) held, the output projection's input gradient, q, k, v's and the projection's
// input gradient (and its input gathered again under sequence parallelism); `head_split` as for
// layer_activation_bytes, `cp_blocks` the key/value blocks of context parallelism's p2p and
// all_gather (the core's fp32 buffers).
double layer_backward_working_bytes(const ModelConfig& cfg, int64_t N, DType dtype, int tp = 1,
                                    bool sequence_parallel = false, const MoeRows* moe = nullptr,
                                    int head_split = 1, bool cp_blocks = false);

}  // namespace tessera::model
