// What a layer needs to know about the micro-batch it is running, beyond its input tensor.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/philox.h"
#include "tessera/core/sequence_split.h"
#include "tessera/kernels/dropout.h"

namespace tessera::model {

// Under --context-parallel-size N a rank holds T = seq_global / N tokens of each sample, its two
// chunks of the load-balanced split (`split`, core/sequence_split.h); everything but the
// attention core works on those T tokens as if they were the sequence, while positions, masks,
// dropout coordinates and the attention core use global positions. Without CP, T = seq_global.
// Under --sequence-parallel a rank's residual stream (embeddings, norms, dropout, residual adds)
// holds tokens [seq_begin, seq_begin + seq_local) of those T; attention and the column/row
// layer pairs see all T. Without it seq_begin = 0 and seq_local = T.
struct StepContext {
  int64_t B = 0;                   // micro-batch size (samples on this rank)
  int64_t T = 0;                   // tokens per sample on this context-parallel rank
  int64_t seq_global = 0;          // sequence length (whole): T * split.size
  SequenceSplit split;             // which tokens of the sequence the T are
  int64_t seq_begin = 0;           // first token of the residual-stream slice (of the T)
  int64_t seq_local = 0;           // tokens per sample in the residual-stream slice
  std::vector<int32_t> positions;  // (T) global position of each token of a sample
  // Per-sample positions (B, T) (--reset-position-ids), used instead of `positions` when not
  // nullptr. Not owned.
  const int32_t* sample_positions = nullptr;
  // (B, T) or nullptr: token t of sample b attends to keys [doc_start[b*T + t], global(t)]
  // only, doc_start a global position (--reset-attention-mask); nullptr is plain causal
  // attention. Not owned.
  const int32_t* doc_start = nullptr;
  // Under context parallelism with doc_start: the whole sequences' (B, seq_global) document
  // starts, for an attention core that sees whole sequences (all-to-all). Not owned.
  const int32_t* doc_start_global = nullptr;
  kernels::TokenCoords coords;     // global token ids of the residual-stream rows (dropout)
  uint64_t seed = 0;               // run seed (--seed)
  int64_t iteration = 0;           // dropout masks differ per iteration
  bool training = true;            // dropout only when training
  // The factor MoE auxiliary losses' gradients are scaled by (moe_layer.h): the loss scale over
  // the number of micro-batches in the global batch; 0 leaves them out of the gradients.
  double moe_aux_loss_scale = 0;
  int64_t N() const { return B * T; }               // tokens in the whole micro-batch
  int64_t local_N() const { return B * seq_local; }  // rows of the residual stream

  // The Philox key of one dropout site: distinct per purpose, layer and iteration, identical on
  // every rank (so masks depend only on global coordinates).
  PhiloxKey dropout_key(RngPurpose purpose, int layer) const {
    return philox_key(seed, purpose, (static_cast<uint64_t>(iteration) << 24) ^ layer);
  }

  // A context for B samples of T tokens (this context-parallel rank's, `split`) starting at
  // global sample index `sample_offset`, the residual stream holding tokens
  // [seq_begin, seq_begin + seq_local) of them (seq_local 0: all T).
  static StepContext make(int64_t B, int64_t T, int64_t sample_offset, uint64_t seed,
                          int64_t iteration, bool training, int64_t seq_begin = 0,
                          int64_t seq_local = 0, SequenceSplit split = {}) {
    StepContext c;
    c.B = B;
    c.T = T;
    c.split = split;
    c.seq_global = T * split.size;
    c.seq_begin = seq_begin;
    c.seq_local = seq_local > 0 ? seq_local : T;
    c.positions.resize(T);
    for (int64_t t = 0; t < T; ++t)
      c.positions[t] = static_cast<int32_t>(split.global(t, c.seq_global));
    c.coords = {sample_offset, c.seq_begin, c.seq_local, c.seq_global, split};
    c.seed = seed;
    c.iteration = iteration;
    c.training = training;
    return c;
  }
};

}  // namespace tessera::model
