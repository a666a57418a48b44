// The all-to-all token dispatcher of expert parallelism (Megatron-Core's
// MoEAlltoAllTokenDispatcher). With tensor parallelism (expert TP = TP) each TP rank exchanges
// rows with the EP peers of its own TP rank, every TP rank moving the same rows. Each of the EP
// ranks of an
// expert-parallel group holds E/EP experts (rank r: experts [r*E/EP, (r+1)*E/EP)) and routes
// its own tokens. The rows a rank permuted for another rank's experts travel to it, are
// computed there, and come back:
//
//   1. counts: every rank learns how many rows every rank has for each expert (one all-gather
//      of E counts);
//   2. dispatch: all-to-all-v of the rows (a rank's rows for peer q's experts are contiguous in
//      the expert-major permutation), then a reorder from (source, expert) to (expert, source)
//      order, so each local expert's rows are contiguous: sources in rank order, each source's
//      rows in its token order;
//   3. the local experts run; 4. combine: the reverse reorder and all-to-all-v.
//
// Backward moves gradients the same way: the gradient of dispatch is combine and vice versa.
// Every member must call these in the same order (they are collectives over the EP group).
//
// The all-gather dispatcher (Megatron's `allgather`, --moe-token-dispatcher-type) moves the
// same rows with all-gathers instead: every rank's permuted rows (padded to the longest) go to
// every rank, which keeps those of its experts, and every rank's expert outputs come back the
// same way. More bytes, no per-peer counts in the data calls; the rows each expert computes,
// and their order, are the alltoall dispatcher's, so both give the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/core/tensor.h"
#include "tessera/moe/permute.h"

namespace tessera::moe {

struct DispatchPlan {
  DispatcherType type = DispatcherType::kAllToAll;
  int ep_size = 1, ep_rank = 0, local_experts = 0;
  std::vector<int64_t> counts;        // (EP * E) rows of rank q for expert e: [q*E + e]
  std::vector<int64_t> send_rows;     // (EP) rows this rank sends to each peer
  std::vector<int64_t> recv_counts;   // (EP * El) rows from peer q for local expert e: [q*El + e]
  std::vector<int64_t> recv_rows;     // (EP) rows from each peer
  std::vector<int64_t> expert_begin;  // (El + 1) local experts' rows, expert-major
  int64_t local_rows() const { return expert_begin.back(); }
};

// Collective over `ep`: exchanges the counts of permutation `p` (over all E experts); every
// rank gets every rank's counts (one all-gather of E counts).
DispatchPlan make_dispatch_plan(const Permutation& p, int num_experts, comm::ProcessGroup& ep,
                                DispatcherType type = DispatcherType::kAllToAll);

// rows (p.rows(), C) in this rank's expert-major order -> the local experts' rows
// (plan.local_rows(), C). Collective over `ep`.
Tensor dispatch(const Tensor& rows, const DispatchPlan& plan, comm::ProcessGroup& ep);
// The inverse: the local experts' rows -> this rank's rows in its expert-major order.
Tensor combine(const Tensor& expert_rows, const DispatchPlan& plan, comm::ProcessGroup& ep);

// Wall seconds this process spent inside dispatch() and combine() (their all-to-alls and
// reorders), summed over calls from any thread: the exchange's share of a step.
double exchange_seconds();

// The elements (not bytes) one dispatch hands to all_to_allv, for C features: what the
// runtime's all-to-all-v counters must show (the rows for the rank's own experts included: they
// do not cross the network but are handed to MPI, as in Megatron's all-to-all).
int64_t dispatch_elements(const DispatchPlan& plan, int64_t C);

}  // namespace tessera::moe
