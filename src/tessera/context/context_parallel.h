// The context-parallel group a model runs in and how each layer's attention uses it
// (Megatron-LM's --context-parallel-size and --cp-comm-type; DeepSpeed Ulysses).
//
// Every rank of the group holds its two chunks of each sequence (core/sequence_split.h) for the
// whole model: embeddings, norms, MLPs and the loss work on those tokens alone; only the
// attention core needs the other ranks' keys and values. How it gets them is the layer's
// communication type:
//   a2a         (DeepSpeed Ulysses): an all-to-all turns the sequence-split q, k, v into whole
//               sequences of 1/N of the heads; the attention kernel runs unchanged; a second
//               all-to-all returns the output to the sequence split (head_exchange.h).
//   p2p         ring attention: the key/value blocks go round the group (block_attention.h)
//   all_gather  K/V gathered, dK/dV reduce-scattered (block_attention.h)
//   a2a+p2p     (hierarchical) an all-to-all inside groups of A = sizes[0] consecutive CP
//               ranks (each then holds its group's tokens for 1/A of the heads), ring attention
//               across the R = sizes[1] groups (Megatron's --hierarchical-context-parallel-sizes)
// Parameters are replicated over the group: their gradients are reduced over data x context
// parallel (Megatron's dp_cp group) by the trainer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/core/sequence_split.h"

namespace tessera::context {

enum class CommType { kP2P, kAllGather, kA2A, kA2AP2P };

// "p2p", "all_gather", "a2a", "a2a+p2p" (Megatron's spellings).
const char* comm_type_name(CommType type);
// The type a name spells; tessera::Error naming `flag` and the accepted values otherwise.
CommType parse_comm_type(const std::string& name, const std::string& flag);

class ContextParallel {
 public:
  // One process: size 1, no group.
  ContextParallel() = default;
  // The members of `group` (nullptr: size 1); `types` one entry for every layer, or one per
  // layer of the model (checked by the model against its layer count). With a2a+p2p among the
  // types, `hierarchical` = {A, R} (A * R = size): collective over `group`, it makes the
  // all-to-all groups (A consecutive ranks) and the ring groups (ranks A apart).
  ContextParallel(std::shared_ptr<comm::ProcessGroup> group, std::vector<CommType> types,
                  std::vector<int> hierarchical = {});

  int size() const { return size_; }
  int rank() const { return rank_; }
  const std::shared_ptr<comm::ProcessGroup>& group() const { return group_; }
  SequenceSplit split() const { return {size_, rank_}; }
  const std::vector<CommType>& types() const { return types_; }
  // The communication type of global layer `layer`.
  CommType type_of(int layer) const;
  // a2a+p2p: the all-to-all group and the ring group of this rank (nullptr otherwise).
  const std::shared_ptr<comm::ProcessGroup>& a2a_group() const { return a2a_group_; }
  const std::shared_ptr<comm::ProcessGroup>& ring_group() const { return ring_group_; }

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
  int size_ = 1, rank_ = 0;
  std::vector<CommType> types_ = {CommType::kP2P};
  std::shared_ptr<comm::ProcessGroup> a2a_group_, ring_group_;
};

}  // namespace tessera::context
