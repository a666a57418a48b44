// The host arithmetic of comm/hosts.h: which TP, CP and expert all-to-all groups of a mesh span
// hosts, and how they and the hosts are printed (the gathering itself runs in cli.multihost).
#include "tessera/comm/hosts.h"

#include <gtest/gtest.h>

namespace tessera::comm {
namespace {

std::vector<std::string> hosts_of(int world, int per_host) {
  std::vector<std::string> hosts;
  for (int r = 0; r < world; ++r) hosts.push_back("node" + std::to_string(r / per_host));
  return hosts;
}

TEST(Hosts, GroupsInsideHostsGiveNoSpan) {
  // 8 ranks, 4 a host: TP 2 x CP 2 fills a host; DP and PP cross hosts, which is fine.
  ParallelConfig cfg;
  cfg.tensor = 2;
  cfg.context = 2;
  EXPECT_TRUE(groups_spanning_hosts(MeshLayout(8, cfg), hosts_of(8, 4)).empty());
}

TEST(Hosts, TensorGroupsAcrossHostsAreNamedAndCounted) {
  // 8 ranks, 2 a host, TP 4: every TP group [0..3], [4..7] spans two hosts.
  ParallelConfig cfg;
  cfg.tensor = 4;
  const std::vector<HostSpan> spans = groups_spanning_hosts(MeshLayout(8, cfg), hosts_of(8, 2));
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].kind, GroupKind::kTensor);
  EXPECT_EQ(spans[0].first_group, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(spans[0].first_hosts, (std::vector<std::string>{"node0", "node1"}));
  EXPECT_EQ(spans[0].spanning, 2);
  EXPECT_EQ(spans[0].groups, 2);
  EXPECT_EQ(host_span_warning(spans[0]).rfind(
                "warning: tensor-parallel group [0,1,2,3] spans hosts node0, node1 (2 of 2 tp "
                "groups do)",
                0),
            0u);
}

TEST(Hosts, ContextAndExpertGroupsAreCheckedToo) {
  // 8 ranks, 2 a host, TP 2 inside hosts; CP 2 spans (ranks 0 and 2 on two hosts).
  ParallelConfig cp;
  cp.tensor = 2;
  cp.context = 2;
  std::vector<HostSpan> spans = groups_spanning_hosts(MeshLayout(8, cp), hosts_of(8, 2));
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].kind, GroupKind::kContext);
  EXPECT_EQ(spans[0].first_group, (std::vector<int>{0, 2}));
  // EP 4 at TP 1: the experts' all-to-all group [0..3] spans two hosts of 2; without EP the
  // experts' group is the TP group and is not reported twice.
  ParallelConfig ep;
  ep.expert = 4;
  spans = groups_spanning_hosts(MeshLayout(8, ep), hosts_of(8, 2));
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].kind, GroupKind::kExpertTensorExpert);
  ParallelConfig tp;
  tp.tensor = 4;
  spans = groups_spanning_hosts(MeshLayout(8, tp), hosts_of(8, 2));
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].kind, GroupKind::kTensor);
}

TEST(Hosts, FormatListsHostsInFirstRankOrder) {
  EXPECT_EQ(format_hosts({"b", "b", "a", "a", "b"}), "hosts: b [0,1,4], a [2,3]");
  ParallelConfig cfg;
  cfg.tensor = 2;
  const std::string mesh = format_mesh(MeshLayout(2, cfg), {"x", "y"});
  EXPECT_NE(mesh.find("hosts: x [0], y [1]\n"), std::string::npos);
  EXPECT_NE(mesh.find("     1    1    0    0    0    1    0    0  y\n"), std::string::npos);
}

}  // namespace
}  // namespace tessera::comm
