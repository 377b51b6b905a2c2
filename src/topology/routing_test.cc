#include "weightport/topology/routing.h"

#include <gtest/gtest.h>

#include <set>

#include "weightport/topology/presets.h"

namespace weightport::topology {
namespace {

bool Crosses(const Graph& g, const Path& p, NodeKind kind) {
  for (int l : p.links)
    if (g.nodes()[g.links()[l].to].kind == kind || g.nodes()[g.links()[l].from].kind == kind) return true;
  return false;
}

std::string Describe(const Graph& g, const Path& p) {
  std::string s;
  for (int l : p.links) s += g.nodes()[g.links()[l].from].name + " -> ";
  return p.links.empty() ? s : s + g.nodes()[g.links()[p.links.back()].to].name;
}

TEST(Routing, AStarRouteHasTwoHopsAndTheirLatency) {
  Graph g("star");
  const int sw = g.AddNode({"sw", NodeKind::kTor});
  const int a = g.AddNode({"a", NodeKind::kHostMemory}), b = g.AddNode({"b", NodeKind::kHostMemory});
  g.AddCable(a, sw, 100, 2);
  g.AddCable(b, sw, 100, 3);
  auto p = Router(g, RoutingPolicy::kShortest).Route(a, b);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->links.size(), 2u);
  EXPECT_EQ(g.links()[p->links[0]].from, a);
  EXPECT_EQ(g.links()[p->links[1]].to, b);
  EXPECT_DOUBLE_EQ(p->latency_us, 5);
  EXPECT_TRUE(Router(g, RoutingPolicy::kEcmp).Route(a, a)->links.empty());
}

TEST(Routing, HostMemoryIsNeverATransitNode) {
  // g0 - mem - g1 is two hops; the only other way is three hops over two switches.
  Graph g("mem");
  const int g0 = g.AddNode({"g0", NodeKind::kGpu}), g1 = g.AddNode({"g1", NodeKind::kGpu});
  const int mem = g.AddNode({"mem", NodeKind::kHostMemory});
  const int s0 = g.AddNode({"s0", NodeKind::kTor}), s1 = g.AddNode({"s1", NodeKind::kTor});
  g.AddCable(g0, mem, 100, 1);
  g.AddCable(g1, mem, 100, 1);
  g.AddCable(g0, s0, 100, 1);
  g.AddCable(s0, s1, 100, 1);
  g.AddCable(s1, g1, 100, 1);
  auto p = Router(g, RoutingPolicy::kEcmp).Route(g0, g1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->links.size(), 3u) << Describe(g, *p);
  EXPECT_FALSE(Crosses(g, *p, NodeKind::kHostMemory));
  // Memory is still a destination.
  EXPECT_EQ(Router(g, RoutingPolicy::kEcmp).Route(g0, mem)->links.size(), 1u);
}

TEST(Routing, EcmpSpreadsFlowsOverEqualSpinesAndShortestDoesNot) {
  // Two leaves of 8 hosts each under 4 spines: 64 cross-leaf pairs.
  Graph g("two-tier");
  std::vector<int> spines, hosts[2];
  for (int s = 0; s < 4; ++s) spines.push_back(g.AddNode({"spine" + std::to_string(s), NodeKind::kSpine}));
  for (int l = 0; l < 2; ++l) {
    const int leaf = g.AddNode({"leaf" + std::to_string(l), NodeKind::kTor});
    for (int s : spines) g.AddCable(leaf, s, 100, 1);
    for (int h = 0; h < 8; ++h) {
      hosts[l].push_back(
          g.AddNode({"h" + std::to_string(l) + "." + std::to_string(h), NodeKind::kHostMemory}));
      g.AddCable(hosts[l].back(), leaf, 100, 1);
    }
  }
  std::vector<std::pair<int, int>> pairs;
  for (int a : hosts[0])
    for (int b : hosts[1]) pairs.push_back({a, b});
  for (RoutingPolicy policy : {RoutingPolicy::kEcmp, RoutingPolicy::kShortest}) {
    auto paths = Router(g, policy).RouteAll(pairs);
    ASSERT_TRUE(paths.ok());
    std::set<int> used;
    for (const Path& p : *paths) {
      ASSERT_EQ(p.links.size(), 4u);
      used.insert(g.links()[p.links[1]].to);  // the spine
    }
    EXPECT_EQ(used.size(), policy == RoutingPolicy::kEcmp ? 4u : 1u) << RoutingPolicyName(policy);
  }
}

TEST(Routing, RailOptimisedCrossesTheNvSwitchToTheDestinationsRailInsteadOfASpine) {
  auto g = MakePreset("dgx-h100", {{"nodes", 2}});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const int from = g->FindNode("node0/gpu0"), to = g->FindNode("node1/gpu3");
  ASSERT_GE(from, 0);
  ASSERT_GE(to, 0);
  auto rail = Router(*g, RoutingPolicy::kRailOptimised).Route(from, to);
  ASSERT_TRUE(rail.ok());
  EXPECT_FALSE(Crosses(*g, *rail, NodeKind::kSpine)) << Describe(*g, *rail);
  EXPECT_TRUE(Crosses(*g, *rail, NodeKind::kNvSwitch)) << Describe(*g, *rail);
  // The same rail: GPU -> NIC -> leaf -> NIC -> GPU.
  auto same = Router(*g, RoutingPolicy::kRailOptimised).Route(from, g->FindNode("node1/gpu0"));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->links.size(), 4u) << Describe(*g, *same);
}

TEST(Routing, ErrorsNameTheNodes) {
  Graph g("islands");
  const int a = g.AddNode({"a", NodeKind::kGpu}), b = g.AddNode({"b", NodeKind::kGpu});
  auto p = Router(g, RoutingPolicy::kEcmp).Route(a, b);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("no path from 'a' to 'b'"), std::string::npos) << p.status().ToString();
  EXPECT_FALSE(Router(g, RoutingPolicy::kEcmp).Route(a, 7).ok());
  EXPECT_EQ(*ParseRoutingPolicy("rail"), RoutingPolicy::kRailOptimised);
  EXPECT_FALSE(ParseRoutingPolicy("fastest").ok());
}

}  // namespace
}  // namespace weightport::topology
