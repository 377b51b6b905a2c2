#include "weightport/topology/graph.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace weightport::topology {
namespace {

using nlohmann::json;

Graph SmallGraph() {
  Graph g("small");
  g.set_params({{"nodes", 1}, {"note", "kept verbatim"}});
  const int host = g.AddDomain({.name = "node0", .kind = DomainKind::kHost});
  const int hbd = g.AddDomain({.name = "node0", .kind = DomainKind::kHbd});
  const int rack = g.AddDomain({.name = "su0", .kind = DomainKind::kRack});
  const int gpu0 = g.AddNode(
      {.name = "node0/gpu0", .kind = NodeKind::kGpu, .hbd = hbd, .host = host, .rack = rack, .rail = 0});
  const int gpu1 = g.AddNode(
      {.name = "node0/gpu1", .kind = NodeKind::kGpu, .hbd = hbd, .host = host, .rack = rack, .rail = 1});
  const int sw = g.AddNode({.name = "node0/nvswitch", .kind = NodeKind::kNvSwitch, .hbd = hbd, .host = host});
  const int mem = g.AddNode({.name = "node0/mem", .kind = NodeKind::kHostMemory, .host = host});
  const int tor = g.AddNode({.name = "tor0", .kind = NodeKind::kTor});
  g.AddCable(gpu0, sw, 3600, 0.25);
  g.AddCable(gpu1, sw, 3600, 0.25, 2.5);
  g.AddLink({.from = mem, .to = tor, .gbps = 100.125, .latency_us = 1.0 / 3, .cost = 0});  // one way only
  g.AddCable(gpu0, mem, 512, 0.5);
  return g;
}

void ExpectSameGraph(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  ASSERT_EQ(a.links().size(), b.links().size());
  ASSERT_EQ(a.domains().size(), b.domains().size());
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const Node &x = a.nodes()[i], &y = b.nodes()[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.hbd, y.hbd);
    EXPECT_EQ(x.host, y.host);
    EXPECT_EQ(x.rack, y.rack);
    EXPECT_EQ(x.rail, y.rail);
    EXPECT_EQ(a.out_links(i), b.out_links(i));
  }
  for (size_t i = 0; i < a.links().size(); ++i) {
    const Link &x = a.links()[i], &y = b.links()[i];
    EXPECT_EQ(x.from, y.from);
    EXPECT_EQ(x.to, y.to);
    EXPECT_EQ(x.gbps, y.gbps);
    EXPECT_EQ(x.latency_us, y.latency_us);
    EXPECT_EQ(x.cost, y.cost);
  }
  EXPECT_EQ(a.params(), b.params());
}

std::string ErrorOf(const json& j) {
  auto g = Graph::FromJson(j);
  return g.ok() ? std::string("(ok)") : g.status().message();
}

TEST(Graph, KindsHaveNames) {
  for (NodeKind k : {NodeKind::kGpu, NodeKind::kHostMemory, NodeKind::kNic, NodeKind::kNvSwitch,
                     NodeKind::kPcieSwitch, NodeKind::kTor, NodeKind::kSpine, NodeKind::kOcs}) {
    auto parsed = ParseNodeKind(NodeKindName(k));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_STREQ(NodeKindName(NodeKind::kHostMemory), "host_memory");
  EXPECT_FALSE(ParseNodeKind("switch").ok());
  for (DomainKind k : {DomainKind::kHbd, DomainKind::kHost, DomainKind::kRack})
    EXPECT_EQ(*ParseDomainKind(DomainKindName(k)), k);
  EXPECT_FALSE(ParseDomainKind("pod").ok());
}

TEST(Graph, BuildsAndFinds) {
  Graph g = SmallGraph();
  ASSERT_TRUE(g.Validate().ok()) << g.Validate().ToString();
  EXPECT_EQ(g.FindNode("node0/mem"), 3);
  EXPECT_EQ(g.FindNode("nope"), -1);
  EXPECT_EQ(g.links().size(), 7u);
  EXPECT_EQ(g.out_links(0), (std::vector<int>{0, 5}));
  EXPECT_EQ(g.out_links(3), (std::vector<int>{4, 6}));
  EXPECT_DOUBLE_EQ(g.links()[0].bytes_per_s(), 450e9);
  EXPECT_EQ(g.Endpoints(), (std::vector<int>{0, 1}));

  Graph hosts("hosts");
  hosts.AddNode({.name = "nic", .kind = NodeKind::kNic});
  hosts.AddNode({.name = "m0", .kind = NodeKind::kHostMemory});
  hosts.AddNode({.name = "m1", .kind = NodeKind::kHostMemory});
  EXPECT_EQ(hosts.Endpoints(), (std::vector<int>{1, 2}));
}

TEST(Graph, JsonRoundTripsExactly) {
  Graph g = SmallGraph();
  const json j = g.ToJson();
  EXPECT_EQ(j["links"].size(), 4u);  // three cables, one one-way link
  EXPECT_EQ(j["links"][0]["duplex"], true);
  EXPECT_EQ(j["links"][2]["duplex"], false);
  EXPECT_EQ(j["nodes"][0]["hbd"], "node0");
  EXPECT_EQ(j["nodes"][0]["rail"], 0);
  EXPECT_FALSE(j["nodes"][4].contains("host"));
  auto back = Graph::FromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameGraph(g, *back);
  EXPECT_EQ(back->ToJson(), j);
  // Through text too.
  auto reparsed = Graph::FromJson(json::parse(j.dump()));
  ASSERT_TRUE(reparsed.ok()) << reparsed.status().ToString();
  ExpectSameGraph(g, *reparsed);
  EXPECT_EQ(reparsed->ToJson().dump(), j.dump());
}

TEST(Graph, JsonErrorsNameThePath) {
  const json good = SmallGraph().ToJson();
  auto with = [&](const json::json_pointer& ptr, json value) {
    json j = good;
    j[ptr] = std::move(value);
    return ErrorOf(j);
  };
  EXPECT_EQ(ErrorOf(good), "(ok)");
  json typo = good;
  typo["nodes"][1]["rial"] = 1;
  EXPECT_EQ(ErrorOf(typo), "topology.nodes[1]: unknown field 'rial'");
  json top = good;
  top["link"] = json::array();
  EXPECT_EQ(ErrorOf(top), "topology: unknown field 'link'");
  EXPECT_EQ(with("/links/1/to"_json_pointer, "node9/gpu0"),
            "topology.links[1]: field 'to': no node 'node9/gpu0'");
  EXPECT_EQ(with("/links/0/gbps"_json_pointer, 0), "topology.links[0]: field 'gbps' must be > 0 (got 0)");
  EXPECT_EQ(with("/links/0/gbps"_json_pointer, "fast"), "topology.links[0]: field 'gbps' must be a number");
  EXPECT_NE(
      with("/links/3/latency_us"_json_pointer, -1).find("topology.links[3]: field 'latency_us' must be >= 0"),
      std::string::npos);
  EXPECT_EQ(with("/nodes/0/hbd"_json_pointer, "node7"),
            "topology.nodes[0]: field 'hbd': no hbd domain 'node7'");
  EXPECT_EQ(with("/nodes/0/rack"_json_pointer, "node0"),
            "topology.nodes[0]: field 'rack': no rack domain 'node0'");
  EXPECT_NE(
      with("/nodes/2/kind"_json_pointer, "switch").find("topology.nodes[2]: unknown node kind 'switch'"),
      std::string::npos);
  EXPECT_EQ(with("/nodes/1/name"_json_pointer, "node0/gpu0"),
            "topology.nodes[1]: node 'node0/gpu0' appears twice");
  EXPECT_EQ(with("/nodes/1/rail"_json_pointer, -2),
            "topology.nodes[1]: field 'rail' must be >= 0 (omit it for no rail)");
  EXPECT_EQ(with("/domains/2/kind"_json_pointer, "host"),
            "topology.nodes[0]: field 'rack': no rack domain 'su0'");
  json twice = good;
  twice["domains"][2]["kind"] = "hbd";
  twice["domains"][2]["name"] = "node0";
  EXPECT_EQ(ErrorOf(twice), "topology.domains[2]: hbd domain 'node0' appears twice");
  EXPECT_EQ(with("/links/0/to"_json_pointer, "node0/gpu0"),
            "topology.links[0]: a link from a node to itself");
  EXPECT_EQ(with("/links/0/duplex"_json_pointer, 1),
            "topology.links[0]: field 'duplex' must be true or false");
  json no_nodes = good;
  no_nodes.erase("nodes");
  EXPECT_EQ(ErrorOf(no_nodes), "topology: field 'nodes' is missing");
  EXPECT_EQ(ErrorOf(json::array()), "topology: expected a JSON object");
}

TEST(Graph, ValidateNamesTheCulprit) {
  {
    Graph g = SmallGraph();
    g.AddLink({.from = 0, .to = 0, .gbps = 1});
    EXPECT_NE(
        g.Validate().message().find("link 7 ('node0/gpu0' -> 'node0/gpu0'): a link from a node to itself"),
        std::string::npos)
        << g.Validate().ToString();
  }
  {
    Graph g = SmallGraph();
    g.AddLink({.from = 0, .to = 1, .gbps = 0});
    EXPECT_NE(
        g.Validate().message().find("link 7 ('node0/gpu0' -> 'node0/gpu1'): bandwidth must be positive"),
        std::string::npos)
        << g.Validate().ToString();
  }
  {
    Graph g = SmallGraph();
    g.AddLink({.from = 0, .to = 1, .gbps = 1, .latency_us = -1});
    EXPECT_NE(g.Validate().message().find("latency must be >= 0"), std::string::npos);
  }
  {
    Graph g = SmallGraph();
    g.AddLink({.from = 0, .to = 1, .gbps = 1, .cost = -1});
    EXPECT_NE(g.Validate().message().find("cost must be >= 0"), std::string::npos);
  }
  {
    Graph g = SmallGraph();
    g.AddLink({.from = 0, .to = 42, .gbps = 1});
    EXPECT_NE(g.Validate().message().find("link 7 ('node0/gpu0' -> node 42): node index out of range"),
              std::string::npos)
        << g.Validate().ToString();
  }
  {
    Graph g = SmallGraph();
    g.AddNode({.name = "node0/gpu1", .kind = NodeKind::kGpu});
    EXPECT_NE(g.Validate().message().find("node 5 'node0/gpu1': the name is also node 1"), std::string::npos)
        << g.Validate().ToString();
  }
  {
    Graph g = SmallGraph();
    g.AddNode({.name = "", .kind = NodeKind::kGpu});
    EXPECT_NE(g.Validate().message().find("node 5: the name is empty"), std::string::npos);
  }
  {
    Graph g = SmallGraph();
    g.AddNode({.name = "x", .kind = NodeKind::kGpu, .hbd = 0});  // domain 0 is a host domain
    EXPECT_NE(g.Validate().message().find("node 5 'x': its hbd domain 'node0' is a host domain"),
              std::string::npos)
        << g.Validate().ToString();
  }
  {
    Graph g = SmallGraph();
    g.AddNode({.name = "x", .kind = NodeKind::kGpu, .rack = 9});
    EXPECT_NE(g.Validate().message().find("node 5 'x': rack domain 9 is out of range"), std::string::npos);
  }
  {
    Graph g = SmallGraph();
    g.AddDomain({.name = "su0", .kind = DomainKind::kRack});
    EXPECT_NE(g.Validate().message().find("domain 3 'su0': the name is also rack domain 2"),
              std::string::npos)
        << g.Validate().ToString();
  }
}

}  // namespace
}  // namespace weightport::topology
