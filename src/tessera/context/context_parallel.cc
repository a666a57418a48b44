#include "tessera/context/context_parallel.h"

#include "tessera/core/error.h"

namespace tessera::context {

const char* comm_type_name(CommType type) {
  switch (type) {
    case CommType::kP2P:
      return "p2p";
    case CommType::kAllGather:
      return "all_gather";
    case CommType::kA2A:
      return "a2a";
    case CommType::kA2AP2P:
      return "a2a+p2p";
  }
  return "?";
}

CommType parse_comm_type(const std::string& name, const std::string& flag) {
  for (CommType t : {CommType::kP2P, CommType::kAllGather, CommType::kA2A, CommType::kA2AP2P})
    if (name == comm_type_name(t)) return t;
  throw Error(flag + " '" + name + "': expected p2p, all_gather, a2a or a2a+p2p");
}

ContextParallel::ContextParallel(std::shared_ptr<comm::ProcessGroup> group,
                                 std::vector<CommType> types, std::vector<int> hierarchical)
    : group_(std::move(group)), types_(std::move(types)) {
  TESSERA_CHECK(!types_.empty());
  if (group_) {
    size_ = group_->size();
    rank_ = group_->rank();
  }
  bool mixed = false;
  for (CommType t : types_) mixed = mixed || t == CommType::kA2AP2P;
  if (!mixed || size_ == 1) return;
  TESSERA_CHECK(hierarchical.size() == 2 && hierarchical[0] * hierarchical[1] == size_);
  const int A = hierarchical[0], R = hierarchical[1];
  std::vector<std::vector<int>> inner(R), ring(A);
  for (int r = 0; r < size_; ++r) {
    inner[r / A].push_back(r);
    ring[r % A].push_back(r);
  }
  a2a_group_ = group_->new_subgroups(inner, "cp-a2a");
  ring_group_ = group_->new_subgroups(ring, "cp-ring");
}

CommType ContextParallel::type_of(int layer) const {
  if (types_.size() == 1) return types_[0];
  TESSERA_CHECK(layer >= 0 && layer < static_cast<int>(types_.size()));
  return types_[layer];
}

}  // namespace tessera::context
