// Which host each rank runs on, and the groups of a mesh whose ranks are on several hosts.
//
// A rank's host is MPI_Get_processor_name: the node's hostname under Open MPI and SLURM (in the
// namespace test bed, scripts/multihost.sh, each namespace's own). Ranks of one host exchange
// data through shared memory; ranks of different hosts over the network, an order of magnitude
// or more slower per byte. Megatron's placement rule follows: the tensor-parallel group, which
// runs collectives in every layer forward and backward, belongs inside a host, and so do the
// context-parallel group and the experts' all-to-all group (expert TP x EP); data- and
// pipeline-parallel groups may cross hosts (their traffic is once a step, or point to point and
// overlapped). With rank order tp-cp-ep-dp-pp (TP fastest) and ranks filling hosts in order
// (mpirun's --map-by slot, SLURM's block distribution), hosts of a multiple of TP x CP ranks
// keep those groups inside.
#pragma once

#include <string>
#include <vector>

#include "tessera/comm/parallel_state.h"
#include "tessera/comm/process_group.h"

namespace tessera::comm {

// The host of every rank of `world`, indexed by rank. Collective over `world`.
std::vector<std::string> gather_host_names(ProcessGroup& world);

// A group kind whose groups should stay inside a host but some do not.
struct HostSpan {
  GroupKind kind;
  std::vector<int> first_group;          // the first group (in layout order) that spans hosts
  std::vector<std::string> first_hosts;  // its distinct hosts, in rank order
  int spanning = 0;                      // how many groups of the kind span hosts
  int groups = 0;                        // how many groups the kind has
};

// The TP, CP and expert all-to-all (expert TP x EP) groups of `layout` that span hosts, given
// every rank's host; empty when each of them is inside one host.
std::vector<HostSpan> groups_spanning_hosts(const MeshLayout& layout,
                                            const std::vector<std::string>& hosts);

// One line for a HostSpan: "warning: tensor-parallel group [0,1] spans hosts a, b (2 of 4 tp
// groups do): ...", naming the group and what to do.
std::string host_span_warning(const HostSpan& span);

// Every host with its ranks, one line: "hosts: a [0,1], b [2,3]".
std::string format_hosts(const std::vector<std::string>& hosts);

}  // namespace tessera::comm
