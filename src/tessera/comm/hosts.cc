#include "tessera/comm/hosts.h"

#include <mpi.h>

#include <algorithm>
#include <cstring>

#include "tessera/comm/flight_report.h"
#include "tessera/core/tensor.h"

namespace tessera::comm {
namespace {

// A host name travels as this many int32 (MPI_MAX_PROCESSOR_NAME is 256 in Open MPI and MPICH).
constexpr int kNameInts = 64;

const char* group_description(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTensor:
      return "tensor-parallel";
    case GroupKind::kContext:
      return "context-parallel";
    default:
      return "expert all-to-all (expert TP x EP)";
  }
}

}  // namespace

std::vector<std::string> gather_host_names(ProcessGroup& world) {
  char name[MPI_MAX_PROCESSOR_NAME + 1] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  Tensor mine = Tensor::zeros({kNameInts}, DType::kI32);
  std::memcpy(mine.raw(), name, std::min<size_t>(std::strlen(name), kNameInts * 4 - 1));
  Tensor all = Tensor::zeros({int64_t{kNameInts} * world.size()}, DType::kI32);
  world.all_gather(mine, all).wait();
  std::vector<std::string> hosts;
  const char* bytes = static_cast<const char*>(all.raw());
  for (int r = 0; r < world.size(); ++r) {
    const char* s = bytes + size_t{kNameInts} * 4 * r;
    hosts.emplace_back(s, strnlen(s, kNameInts * 4));
  }
  return hosts;
}

std::vector<HostSpan> groups_spanning_hosts(const MeshLayout& layout,
                                            const std::vector<std::string>& hosts) {
  std::vector<HostSpan> spans;
  for (GroupKind kind : {GroupKind::kTensor, GroupKind::kContext, GroupKind::kExpertTensorExpert}) {
    // Without expert parallelism the experts' group is the tensor-parallel one (said once).
    if (kind == GroupKind::kExpertTensorExpert && layout.expert() == 1) continue;
    HostSpan span{kind, {}, {}, 0, 0};
    for (const std::vector<int>& group : layout.all_groups(kind)) {
      ++span.groups;
      std::vector<std::string> distinct;
      for (int r : group)
        if (std::find(distinct.begin(), distinct.end(), hosts.at(r)) == distinct.end())
          distinct.push_back(hosts.at(r));
      if (distinct.size() < 2) continue;
      if (span.spanning++ == 0) {
        span.first_group = group;
        span.first_hosts = distinct;
      }
    }
    if (span.spanning > 0) spans.push_back(span);
  }
  return spans;
}

std::string host_span_warning(const HostSpan& s) {
  std::string hosts;
  for (size_t i = 0; i < s.first_hosts.size(); ++i) {
    if (i > 0) hosts += ", ";
    hosts += s.first_hosts[i];
  }
  return std::string("warning: ") + group_description(s.kind) + " group " +
         rank_list(s.first_group) + " spans hosts " + hosts + " (" + std::to_string(s.spanning) +
         " of " + std::to_string(s.groups) + " " + group_kind_name(s.kind) +
         " groups do): its collectives cross the network every layer; give each host a multiple "
         "of TP x CP ranks, filled in rank order (mpirun --map-by slot)";
}

std::string format_hosts(const std::vector<std::string>& hosts) {
  std::vector<std::string> order;
  for (const std::string& h : hosts)
    if (std::find(order.begin(), order.end(), h) == order.end()) order.push_back(h);
  std::string out = "hosts:";
  for (size_t i = 0; i < order.size(); ++i) {
    std::vector<int> ranks;
    for (size_t r = 0; r < hosts.size(); ++r)
      if (hosts[r] == order[i]) ranks.push_back(static_cast<int>(r));
    out += i > 0 ? ", " : " ";
    out += order[i];
    out += " ";
    out += rank_list(ranks);
  }
  return out;
}

}  // namespace tessera::comm
