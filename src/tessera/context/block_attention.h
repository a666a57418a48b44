// Context-parallel attention that keeps the heads whole and moves keys and values instead
// (Megatron-LM's --cp-comm-type p2p and all_gather): each rank's queries (its two chunks of
// every sample, core/sequence_split.h) attend to every rank's key/value block in turn with the
// block kernels (kernels/attention_block.h), and the partial outputs merge by their
// log-sum-exp.
//   p2p (ring attention, Liu et al. 2023; Megatron's default): at step s a rank holds the block
//     of rank r - s; while it computes, the block travels on to r + 1 (non-blocking send and
//     receive on the runtime's communication thread). Backward sends the blocks round again
//     with their dK/dV accumulators, which reach their owner after N steps.
//   all_gather: one all-gather of K/V before the blocks, one reduce-scatter of dK/dV after.
// With the load-balanced split each step costs every rank the same: at step 0 its own chunks
// (two diagonal pairs and one whole pair), at every other step two whole chunk pairs
// (docs/context_parallel.md).
//
// Under a2a+p2p the ring runs over groups of A context-parallel ranks whose tokens an
// all-to-all has gathered (head_exchange.h): a rank's queries and a block are then the chunks of
// A ranks, 2A chunks of T / (2N) each, in member order.
//
// Work per call is counted (visible query-key pairs, FLOPs) so the balance across ranks can be
// checked; bytes are counted by the runtime per group (comm::CommStats). Not thread-safe (the
// counters): one caller at a time, as the model's layers are.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/context/context_parallel.h"
#include "tessera/core/sequence_split.h"
#include "tessera/core/tensor.h"
#include "tessera/kernels/attention.h"

namespace tessera::context {

// The shape and coordinates of one attention call on a rank's tokens.
struct BlockAttentionShape {
  int64_t B = 0, T_local = 0;  // samples, tokens per sample on this rank (its chunks)
  int64_t seq = 0;             // the whole sequence's length
  int NH = 0, KV = 0, HD = 0;  // this rank's query heads, key/value groups, head dim
  kernels::AttentionDropout dropout;
  // (B, T_local): the first key position each local query may see, or nullptr (causal).
  const int32_t* doc_start = nullptr;
};

class BlockAttention {
 public:
  BlockAttention() = default;
  // type: kP2P or kAllGather; group: the context-parallel group (size > 1), each member holding
  // its own two chunks.
  BlockAttention(std::shared_ptr<comm::ProcessGroup> group, CommType type);
  // The ring of a2a+p2p: member m of `ring` holds the chunks of context-parallel ranks
  // members[m] (of cp_size), in that order.
  BlockAttention(std::shared_ptr<comm::ProcessGroup> ring, int cp_size,
                 std::vector<std::vector<int>> members);

  // qkv (B * T_local, (NH + 2 KV) * HD) this rank's tokens after RoPE -> attn (B * T_local,
  // NH * HD) in qkv's dtype and lse (B, NH, T_local) fp32 over the whole sequence's keys.
  void forward(Tensor& attn, Tensor& lse, const Tensor& qkv, const BlockAttentionShape& s) const;
  // dqkv (as qkv) from dattn, given forward's qkv, attn and lse.
  Tensor backward(const Tensor& dattn, const Tensor& qkv, const Tensor& attn, const Tensor& lse,
                  const BlockAttentionShape& s) const;

  // Query-key pairs the kernels computed (visible under the causal mask, before document
  // masks), forward and backward, since construction; and the wall time in communication.
  int64_t pairs() const { return pairs_; }
  double comm_seconds() const { return comm_seconds_; }

 private:
  // Position of the first token of each chunk member m holds, in row order.
  std::vector<int64_t> chunk_positions(int m, int64_t seq) const;
  // Calls attend(block, holder) for every member's key/value block, `mine` being this rank's:
  // from one all-gather, or round the ring (after_step, if set, runs after each step's attend).
  void each_block(const Tensor& mine, const std::function<void(const Tensor&, int)>& attend,
                  const std::function<void()>& after_step) const;
  // Waits for both, counting the time as communication.
  void wait(comm::Work& a, comm::Work& b) const;

  std::shared_ptr<comm::ProcessGroup> group_;
  CommType type_ = CommType::kP2P;
  int cp_size_ = 1;
  std::vector<std::vector<int>> members_;
  mutable int64_t pairs_ = 0;
  mutable double comm_seconds_ = 0;
};

}  // namespace tessera::context
