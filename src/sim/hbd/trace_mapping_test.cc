#include "weightport/sim/hbd/trace_mapping.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace weightport::sim::hbd {
namespace {

FaultTrace Listed(int servers) {
  FaultTrace t;
  for (int n = 0; n < servers; ++n) t.node_ids.push_back("s" + std::to_string(n));
  return t;
}

// Cluster node -> how many listed trace servers take it down.
std::map<int, int> Uses(const TraceMapping& m) {
  std::map<int, int> uses;
  for (const auto& nodes : m.nodes)
    for (int n : nodes) ++uses[n];
  return uses;
}

TEST(TraceMapping, ServersOfANodesSizeTakeDistinctNodes) {
  auto m = MapTrace(Listed(30), 100, 4, 100, 4, 7);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->slots, 100);
  EXPECT_DOUBLE_EQ(m->copies, 1);
  for (const auto& nodes : m->nodes) EXPECT_EQ(nodes.size(), 1u);
  EXPECT_EQ(Uses(*m).size(), 30u);  // 70 nodes hold servers that never failed
  auto in_order = MapTrace(Listed(3), 10, 4, 10, 4, 0);
  ASSERT_TRUE(in_order.ok());
  EXPECT_EQ(in_order->nodes, (std::vector<std::vector<int>>{{0}, {1}, {2}}));
  EXPECT_NE(MapTrace(Listed(30), 100, 4, 100, 4, 8)->nodes, m->nodes);
}

// An 8-GPU server on 4-GPU nodes takes two neighbouring nodes down; 4-GPU servers on 8-GPU nodes
// share them two to a node.
TEST(TraceMapping, BiggerServersSpanNodesAndSmallerOnesShareThem) {
  auto span = MapTrace(Listed(10), 10, 8, 21, 4, 3);
  ASSERT_TRUE(span.ok()) << span.status().ToString();
  EXPECT_EQ(span->slots, 10);
  EXPECT_EQ(span->idle_nodes, 1);
  for (const auto& nodes : span->nodes) {
    ASSERT_EQ(nodes.size(), 2u);
    EXPECT_EQ(nodes[0] % 2, 0);
    EXPECT_EQ(nodes[1], nodes[0] + 1);
  }
  EXPECT_EQ(Uses(*span).size(), 20u);
  auto share = MapTrace(Listed(20), 20, 4, 10, 8, 3);
  ASSERT_TRUE(share.ok()) << share.status().ToString();
  EXPECT_EQ(share->slots, 20);
  for (const auto& [node, uses] : Uses(*share)) EXPECT_EQ(uses, 2) << node;
}

// A cluster 2.5 times the trace holds two whole copies of it and half of a third.
TEST(TraceMapping, ABiggerClusterTilesCopiesOfTheTrace) {
  auto m = MapTrace(Listed(100), 100, 4, 250, 4, 11);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_DOUBLE_EQ(m->copies, 2.5);
  int placed = 0;
  for (const auto& nodes : m->nodes) {
    EXPECT_GE(nodes.size(), 2u);
    EXPECT_LE(nodes.size(), 3u);
    placed += static_cast<int>(nodes.size());
  }
  EXPECT_EQ(placed, 250);
  EXPECT_EQ(Uses(*m).size(), 250u);
  // A smaller one holds part of one copy.
  auto part = MapTrace(Listed(100), 100, 4, 40, 4, 11);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(Uses(*part).size(), 40u);
}

TEST(TraceMapping, ImpossibleLayoutsNameTheirFigures) {
  const auto error = [](Result<TraceMapping> m) {
    return m.ok() ? std::string("(ok)") : m.status().message();
  };
  EXPECT_NE(
      error(MapTrace(Listed(30), 20, 8, 100, 4, 1)).find("lists 30 servers with faults, more than the 20"),
      std::string::npos);
  EXPECT_NE(error(MapTrace(Listed(3), 20, 6, 100, 4, 1)).find("servers of 6 GPUs do not tile nodes of 4"),
            std::string::npos);
  EXPECT_NE(error(MapTrace(Listed(3), 20, 16, 3, 4, 1)).find("3 nodes of 4 GPUs holds no trace server of 16"),
            std::string::npos);
}

}  // namespace
}  // namespace weightport::sim::hbd
