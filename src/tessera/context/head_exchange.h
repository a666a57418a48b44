// DeepSpeed Ulysses' exchange (Jacobs et al., "DeepSpeed Ulysses", 2023) on Tessera's
// load-balanced split: an all-to-all over the context-parallel group that turns a
// sequence-split packed activation (each rank: its two chunks of every sample, all heads) into a
// head-split one (each rank: whole sequences, in order, of 1/N of the heads), and back.
//
// Which columns a rank receives is a HeadColumns: the same width for every rank, made of column
// ranges of the packed activation. Query heads split evenly; key/value groups split when N
// divides their number, else (N a multiple of it) each rank takes the one group its query heads
// read, and the ranks sharing a group sum its gradient on the way back (in rank order, fp32).
//
// Each call is one synchronous all-to-all of B * T_local * w elements per peer (T_local = T / N
// tokens per sample on a rank, w the head-split width), so forward and backward each move
// (N - 1) / N of a layer's q, k, v and output columns per rank (docs/context_parallel.md).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/core/tensor.h"

namespace tessera::context {

struct HeadColumns {
  int64_t width = 0;        // columns of the sequence-split activation
  int64_t heads_width = 0;  // columns of the head-split activation (every rank the same)
  // Per rank: the [begin, end) column ranges of the sequence-split activation that make up its
  // head-split columns, in order.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges;
};

// Packed q, k, v ([NH query heads | KV key groups | KV value groups] of HD columns each) over N
// ranks: rank d takes query heads [d NH/N, (d+1) NH/N) and the key/value groups they read (KV/N
// groups when N divides KV; when KV divides N, the one group of its heads). tessera::Error when
// N divides neither NH nor (KV or N by KV) — the caller's arguments check says which flag.
HeadColumns qkv_columns(int NH, int KV, int HD, int N);
// The attention output (NH heads of HD columns): rank d takes heads [d NH/N, (d+1) NH/N).
HeadColumns head_columns(int NH, int HD, int N);

class HeadExchange {
 public:
  HeadExchange() = default;
  explicit HeadExchange(std::shared_ptr<comm::ProcessGroup> group) : group_(std::move(group)) {}

  // x (B * T_local, width) of this rank's tokens (its chunks, core/sequence_split.h) ->
  // (B * T, heads_width): every sample whole and in order, the columns of ranges[rank]. With
  // `in_order` false (a2a+p2p, where the group is part of the context-parallel group) the
  // members' tokens are concatenated in member order instead.
  Tensor to_heads(const Tensor& x, int64_t B, const HeadColumns& cols, bool in_order = true) const;
  // The inverse of to_heads for y (B * T, heads_width): this rank's tokens, all columns; columns
  // that several ranks hold are summed over them in rank order (in fp32, rounded once).
  Tensor to_sequence(const Tensor& y, int64_t B, const HeadColumns& cols,
                     bool in_order = true) const;

  // Wall time spent in the all-to-alls (issue to completion), for the benchmark's comm share.
  double comm_seconds() const { return comm_seconds_; }

 private:
  void exchange(const Tensor& send, Tensor& recv) const;

  std::shared_ptr<comm::ProcessGroup> group_;
  mutable double comm_seconds_ = 0;
};

}  // namespace tessera::context
