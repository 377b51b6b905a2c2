#include "weightport/plan/graph_topology.h"

#include <gtest/gtest.h>

#include "weightport/topology/presets.h"

namespace weightport {
namespace {

TEST(PlannerTopology, AnNvLinkDomainIsOneHostWithItsNicsSummed) {
  auto g = topology::MakePreset("dgx-h100", {{"nodes", 2}});
  ASSERT_TRUE(g.ok());
  const std::vector<int> gpus = g->Endpoints();
  // Sources on node0's 8 GPUs, destinations on node1's.
  auto t = PlannerTopology(*g, {gpus.begin(), gpus.begin() + 8}, {gpus.begin() + 8, gpus.end()});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->hosts().size(), 2u);
  EXPECT_DOUBLE_EQ(t->hosts()[0].nic_gbps, 8 * 400);
  EXPECT_EQ(t->hosts()[0].src_ranks.size(), 8u);
  EXPECT_EQ(t->hosts()[1].dst_ranks.size(), 8u);
  EXPECT_DOUBLE_EQ(t->intra_host_bytes_per_s(), 8 * 3600 * 1e9 / 8);
  EXPECT_EQ(t->HostOf({PlanSide::kDestination, 3}), 1);
}

TEST(PlannerTopology, ARingHbdPlansPerHost) {
  // An optical ring is one HBD, but its far members are many hops apart: plan per host.
  auto g = topology::MakePreset("infinitehbd", {{"nodes", 4}, {"gpus_per_node", 4}});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::vector<int> gpus = g->Endpoints();
  auto t = PlannerTopology(*g, {gpus[0]}, {gpus.begin() + 4, gpus.end()});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->hosts().size(), 4u);
  EXPECT_DOUBLE_EQ(t->hosts()[0].nic_gbps, 4 * 400);
}

TEST(PlannerTopology, ANodeOutsideTheGraphIsNamed) {
  auto g = topology::MakePreset("fat-tree", {{"hosts", 2}});
  ASSERT_TRUE(g.ok());
  auto t = PlannerTopology(*g, {0}, {99999});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("dst rank 0"), std::string::npos) << t.status().ToString();
}

}  // namespace
}  // namespace weightport
