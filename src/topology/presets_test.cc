#include "weightport/topology/presets.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>

namespace weightport::topology {
namespace {

using nlohmann::json;

Graph Make(const std::string& name, const json& params = json::object()) {
  auto g = MakePreset(name, params);
  EXPECT_TRUE(g.ok()) << name << " " << params.dump() << ": " << g.status().ToString();
  return g.ok() ? std::move(g).value() : Graph();
}

std::map<std::string, int> KindCounts(const Graph& g) {
  std::map<std::string, int> c;
  for (const Node& n : g.nodes()) ++c[NodeKindName(n.kind)];
  return c;
}

// The neighbours of `node` of one kind, by name.
std::vector<std::string> Neighbours(const Graph& g, int node, NodeKind kind) {
  std::vector<std::string> out;
  for (int l : g.out_links(node))
    if (g.nodes()[g.links()[l].to].kind == kind) out.push_back(g.nodes()[g.links()[l].to].name);
  return out;
}

double GbpsTo(const Graph& g, const std::string& from, const std::string& to) {
  const int a = g.FindNode(from), b = g.FindNode(to);
  for (int l : g.out_links(a))
    if (g.links()[l].to == b) return g.links()[l].gbps;
  return -1;
}

std::string ErrorOf(const std::string& name, const json& params) {
  auto g = MakePreset(name, params);
  return g.ok() ? "(ok)" : g.status().message();
}

TEST(Presets, ListIsConsistent) {
  std::set<std::string> names;
  for (const PresetInfo& info : Presets()) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    EXPECT_FALSE(info.summary.empty());
    EXPECT_EQ(info.defaults.size(), info.help.size()) << info.name;
    for (const auto& [key, value] : info.defaults.items()) EXPECT_TRUE(info.help.contains(key)) << key;
    Graph g = Make(info.name);
    EXPECT_EQ(g.name(), info.name);
    EXPECT_TRUE(g.Validate().ok());
    for (const auto& [key, value] : info.defaults.items()) EXPECT_TRUE(g.params().contains(key)) << key;
  }
  EXPECT_EQ(names, (std::set<std::string>{"dgx-h100", "dgx-h200", "gb200-nvl72", "tpuv4", "infinitehbd",
                                          "fat-tree"}));
}

TEST(Presets, EveryPresetRoundTripsThroughJson) {
  for (const PresetInfo& info : Presets()) {
    Graph g = Make(info.name);
    const json j = g.ToJson();
    auto back = Graph::FromJson(json::parse(j.dump()));
    ASSERT_TRUE(back.ok()) << info.name << ": " << back.status().ToString();
    EXPECT_EQ(back->ToJson(), j) << info.name;
    EXPECT_EQ(back->links().size(), g.links().size());
  }
}

TEST(Presets, ErrorsNameThePresetAndKey) {
  EXPECT_EQ(ErrorOf("dgx-h100", {{"nodez", 4}}).substr(0, 50),
            "preset 'dgx-h100': unknown parameter 'nodez' (know");
  EXPECT_EQ(ErrorOf("dgx-h100", {{"nodes", 0}}),
            "preset 'dgx-h100': parameter 'nodes' must be an integer in [1, 131072] (got 0)");
  EXPECT_EQ(ErrorOf("dgx-h100", {{"nodes", 2.5}}),
            "preset 'dgx-h100': parameter 'nodes' must be an integer in [1, 131072]");
  EXPECT_EQ(ErrorOf("dgx-h200", {{"nic_gbps", -1}}),
            "preset 'dgx-h200': parameter 'nic_gbps' must be > 0 (got -1)");
  EXPECT_EQ(ErrorOf("tpuv4", {{"spines", "many"}}),
            "preset 'tpuv4': parameter 'spines' must be \"auto\" or an integer in [0, 4096]");
  EXPECT_EQ(ErrorOf("gb200-nvl72", {{"gpus_per_rack", 70}}),
            "preset 'gb200-nvl72': parameter 'gpus_per_rack' must be a multiple of gpus_per_node (4)");
  EXPECT_EQ(ErrorOf("infinitehbd", {{"ring_nodes", 3}}),
            "preset 'infinitehbd': parameter 'ring_nodes' must divide nodes (8)");
  EXPECT_EQ(ErrorOf("infinitehbd", {{"k", 8}}),
            "preset 'infinitehbd': parameter 'k' must be an integer in [1, 7] (got 8)");
  EXPECT_EQ(ErrorOf("fat-tree", {{"hosts", 16}, {"spines", 0}}),
            "preset 'fat-tree': parameter 'spines' must be >= 1: there are 2 leaves to join");
  EXPECT_EQ(ErrorOf("fat-tree", json::array()), "preset 'fat-tree': parameters must be a JSON object");
  auto unknown = MakePreset("dgx-a100");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("unknown topology preset 'dgx-a100'"), std::string::npos);
}

// Sizes each within its range whose product is too large are refused before anything is built
// (they used to abort with std::bad_alloc after taking 2-4 GB).
TEST(Presets, OversizedGraphsAreRefusedBeforeBuilding) {
  struct Case {
    const char* preset;
    json params;
    const char* param;
  };
  const Case cases[] = {
      {"dgx-h100", {{"nodes", 131072}, {"gpus_per_node", 64}}, "'nodes' = 131072"},
      {"gb200-nvl72", {{"racks", 131072}}, "'racks' = 131072"},
      {"fat-tree", {{"hosts", 1048576}, {"gpus_per_host", 64}}, "'hosts' = 1048576"},
      {"fat-tree", {{"hosts", 1048576}, {"hosts_per_tor", 1}, {"spines", 4096}}, "'hosts' = 1048576"},
      {"infinitehbd", {{"nodes", 131072}, {"gpus_per_node", 64}}, "'nodes' = 131072"},
      {"tpuv4", {{"cubes", 8192}, {"hosts_per_tor", 1}, {"spines", 4096}}, "'cubes' = 8192"},
  };
  for (const Case& c : cases) {
    const std::string error = ErrorOf(c.preset, c.params);
    EXPECT_NE(error.find(c.param), std::string::npos) << c.preset << ": " << error;
    EXPECT_NE(error.find("limit is 4194304 nodes and 16777216 links"), std::string::npos) << error;
  }
}

// "auto" spines from a tiny oversubscription: the uplink count was cast to int unchecked (undefined;
// here it came out as 1 spine instead of the most, 32).
TEST(Presets, AutoSpinesOfATinyOversubscriptionAreTheMost) {
  Graph g = Make("fat-tree", {{"hosts", 16}, {"spines", "auto"}, {"oversubscription", 1e-300}});
  EXPECT_EQ(g.params()["spines"], 32);
}

TEST(Presets, DgxTwoNodes) {
  Graph g = Make("dgx-h100", {{"nodes", 2}});
  // Per node 8 GPUs, 8 NICs, an NVSwitch, host memory; one SU of 8 rail leaves; 2 spines (a
  // leaf has 2 downlinks). Links: per node 8 x (NVSwitch, memory, NIC, leaf) cables; 8 x 2 leaf-spine.
  EXPECT_EQ(KindCounts(g),
            (std::map<std::string, int>{
                {"gpu", 16}, {"nic", 16}, {"nvswitch", 2}, {"host_memory", 2}, {"tor", 8}, {"spine", 2}}));
  EXPECT_EQ(g.nodes().size(), 46u);
  EXPECT_EQ(g.links().size(), 2u * (2 * 8 * 4 + 8 * 2));
  EXPECT_EQ(g.domains().size(), 5u);  // su0, 2 hosts, 2 HBDs
  EXPECT_EQ(g.params()["spines"], 2);
  EXPECT_EQ(g.params()["gpu_memory_gb"], 80);
  EXPECT_EQ(GbpsTo(g, "node1/gpu3", "node1/nvswitch"), 3600);
  EXPECT_EQ(GbpsTo(g, "node1/gpu3", "node1/mem"), 512);
  EXPECT_EQ(GbpsTo(g, "node1/gpu3", "node1/nic3"), 512);
  EXPECT_EQ(GbpsTo(g, "node1/nic3", "su0/leaf-rail3"), 400);
  EXPECT_EQ(GbpsTo(g, "su0/leaf-rail3", "spine1"), 400);  // 2 x 400 down over 2 spines
  const std::vector<int> ep = g.Endpoints();
  ASSERT_EQ(ep.size(), 16u);
  for (int r = 0; r < 16; ++r)
    EXPECT_EQ(g.nodes()[ep[r]].name, "node" + std::to_string(r / 8) + "/gpu" + std::to_string(r % 8));
  const Node& gpu = g.nodes()[g.FindNode("node1/gpu5")];
  EXPECT_EQ(g.domains()[gpu.hbd].name, "node1");
  EXPECT_EQ(g.domains()[gpu.host].name, "node1");
  EXPECT_EQ(g.domains()[gpu.rack].name, "su0");
  EXPECT_EQ(gpu.rail, 5);
  EXPECT_EQ(Make("dgx-h200").params()["gpu_memory_gb"], 141);
  EXPECT_EQ(Make("dgx-h200").links().size(), g.links().size());
}

TEST(Presets, DgxRailsAcrossScalableUnits) {
  Graph g = Make("dgx-h100", {{"nodes", 40}, {"nodes_per_su", 16}, {"oversubscription", 2}});
  EXPECT_EQ(KindCounts(g)["tor"], 3 * 8);  // SUs of 16, 16, 8 nodes
  EXPECT_EQ(KindCounts(g)["spine"], 8);    // 16 downlinks / 2
  EXPECT_EQ(GbpsTo(g, "su0/leaf-rail0", "spine7"), 16 * 400 / 8 / 2.0);
  EXPECT_EQ(GbpsTo(g, "su2/leaf-rail0", "spine7"), 8 * 400 / 8 / 2.0);
  for (int e : g.Endpoints()) {
    const Node& gpu = g.nodes()[e];
    const auto nics = Neighbours(g, e, NodeKind::kNic);
    ASSERT_EQ(nics.size(), 1u) << gpu.name;
    const auto leaves = Neighbours(g, g.FindNode(nics[0]), NodeKind::kTor);
    const int node = std::stoi(gpu.name.substr(4));
    EXPECT_EQ(leaves, std::vector<std::string>{"su" + std::to_string(node / 16) + "/leaf-rail" +
                                               std::to_string(gpu.rail)})
        << gpu.name;
    EXPECT_EQ(g.nodes()[g.FindNode(nics[0])].rail, gpu.rail);
  }
  EXPECT_EQ(g.domains()[g.nodes()[g.FindNode("su1/leaf-rail2")].rack].name, "su1");
}

TEST(Presets, Gb200) {
  Graph g = Make("gb200-nvl72");
  // Per rack 72 GPUs, 72 NICs, an NVSwitch, 18 tray memories; one SU: 4 rail leaves of 36 ports;
  // 32 spines (capped).
  EXPECT_EQ(
      KindCounts(g),
      (std::map<std::string, int>{
          {"gpu", 144}, {"nic", 144}, {"nvswitch", 2}, {"host_memory", 36}, {"tor", 4}, {"spine", 32}}));
  EXPECT_EQ(g.links().size(), 2u * (144 * 4 + 4 * 32));
  EXPECT_EQ(g.domains().size(), 2u + 2 + 36);
  EXPECT_EQ(GbpsTo(g, "rack1/gpu71", "rack1/nvswitch"), 7200);
  EXPECT_EQ(GbpsTo(g, "rack1/gpu71", "rack1/tray17/mem"), 1800);
  EXPECT_EQ(GbpsTo(g, "rack1/nic71", "su0/leaf-rail3"), 400);
  EXPECT_EQ(GbpsTo(g, "su0/leaf-rail3", "spine0"), 36 * 400 / 32.0);
  const Node& gpu = g.nodes()[g.FindNode("rack1/gpu6")];
  EXPECT_EQ(g.domains()[gpu.hbd].name, "rack1");
  EXPECT_EQ(g.domains()[gpu.host].name, "rack1/tray1");
  EXPECT_EQ(gpu.rail, 2);
  EXPECT_EQ(KindCounts(Make("gb200-nvl72", {{"racks", 1}, {"gpus_per_rack", 36}}))["gpu"], 36);
  EXPECT_EQ(KindCounts(Make("gb200-nvl72", {{"racks", 1}, {"gpus_per_rack", 576}}))["host_memory"], 144);
}

TEST(Presets, Tpuv4) {
  Graph g = Make("tpuv4");
  // Per cube 64 chips, 16 hosts (memory + NIC); 3 OCS nodes; one ToR per cube; 16 spines.
  EXPECT_EQ(KindCounts(g),
            (std::map<std::string, int>{
                {"gpu", 128}, {"host_memory", 32}, {"nic", 32}, {"ocs", 3}, {"tor", 2}, {"spine", 16}}));
  // Per cube: 144 internal ICI cables, 96 to an OCS, 64 to memory, 64 to the NIC, 16 NIC-ToR.
  EXPECT_EQ(g.links().size(), 2u * (2 * (144 + 96 + 64 + 64 + 16) + 2 * 16));
  for (int e : g.Endpoints()) {
    int ici = 0;
    for (int l : g.out_links(e)) {
      const NodeKind k = g.nodes()[g.links()[l].to].kind;
      if (k == NodeKind::kGpu || k == NodeKind::kOcs) {
        ++ici;
        EXPECT_EQ(g.links()[l].gbps, 400);
      }
    }
    EXPECT_EQ(ici, 6) << g.nodes()[e].name;
  }
  EXPECT_EQ(Neighbours(g, g.FindNode("cube1/chip0"), NodeKind::kOcs),
            (std::vector<std::string>{"ocs-x", "ocs-y", "ocs-z"}));
  EXPECT_EQ(Neighbours(g, g.FindNode("cube0/chip21"), NodeKind::kOcs).size(), 0u);  // (1,1,1): inside
  const Node& chip = g.nodes()[g.FindNode("cube1/chip21")];
  EXPECT_EQ(g.domains()[chip.hbd].name, "cube1");
  EXPECT_EQ(g.domains()[chip.host].name, "cube1/host4");  // hosts are 2x2x1 blocks: z = 1
  EXPECT_EQ(Neighbours(g, g.FindNode("cube1/host0/nic"), NodeKind::kTor), std::vector<std::string>{"tor1"});
}

TEST(Presets, InfiniteHbd) {
  Graph g = Make("infinitehbd");
  // 8 nodes x (4 GPUs, 4 NICs, PCIe switch, memory); 4 rail leaves; 8 spines.
  EXPECT_EQ(KindCounts(g),
            (std::map<std::string, int>{
                {"gpu", 32}, {"nic", 32}, {"pcie_switch", 8}, {"host_memory", 8}, {"tor", 4}, {"spine", 8}}));
  // 32 x (switch, memory, NIC, leaf) cables, 32 ring cables, 4 x 8 leaf-spine.
  EXPECT_EQ(g.links().size(), 2u * (32 * 4 + 32 + 32));
  EXPECT_EQ(g.params()["ring_nodes"], 8);
  EXPECT_EQ(GbpsTo(g, "node3/gpu2", "node4/gpu2"), 1800);
  EXPECT_EQ(GbpsTo(g, "node3/gpu2", "node2/gpu2"), 1800);
  EXPECT_EQ(GbpsTo(g, "node7/gpu1", "node0/gpu1"), 1800);  // wraps around
  EXPECT_EQ(GbpsTo(g, "node3/gpu2", "node4/gpu1"), -1);

  Graph two = Make("infinitehbd", {{"ring_nodes", 4}});
  EXPECT_EQ(GbpsTo(two, "node3/gpu0", "node0/gpu0"), 1800);  // wraps within its ring
  EXPECT_EQ(GbpsTo(two, "node3/gpu0", "node4/gpu0"), -1);
  const Node& gpu = two.nodes()[two.FindNode("node5/gpu0")];
  EXPECT_EQ(two.domains()[gpu.hbd].name, "ring1");
}

TEST(Presets, FatTree) {
  Graph g = Make("fat-tree");
  EXPECT_EQ(KindCounts(g),
            (std::map<std::string, int>{{"host_memory", 8}, {"nic", 8}, {"tor", 1}, {"spine", 2}}));
  EXPECT_EQ(g.links().size(), 2u * (8 + 8 + 2));
  EXPECT_EQ(GbpsTo(g, "host3/nic", "tor0"), 100);
  EXPECT_EQ(GbpsTo(g, "tor0", "spine1"), 400);  // 8 x 100 over 2 spines

  Graph bridge = Make("fat-tree", {{"hosts", 4}, {"spines", 0}});
  EXPECT_EQ(bridge.nodes().size(), 9u);
  EXPECT_EQ(bridge.Endpoints().size(), 4u);

  Graph gpus = Make("fat-tree", {{"hosts", 20}, {"gpus_per_host", 2}, {"spines", "auto"}});
  EXPECT_EQ(KindCounts(gpus)["tor"], 3);
  EXPECT_EQ(gpus.params()["spines"], 8);
  EXPECT_EQ(gpus.Endpoints().size(), 40u);
  EXPECT_EQ(gpus.nodes()[gpus.Endpoints()[3]].name, "host1/gpu1");
}

TEST(Presets, SixteenThousandGpusBuildQuickly) {
  const auto start = std::chrono::steady_clock::now();
  Graph g = Make("dgx-h100", {{"nodes", 2048}});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(g.Endpoints().size(), 16384u);
  EXPECT_EQ(g.nodes().size(), 2048u * 18 + 64 * 8 + 32);
  EXPECT_EQ(g.links().size(), 2u * (2048 * 32 + 512 * 32));
  std::printf("dgx-h100 nodes=2048: %zu nodes, %zu links, built in %.3f s\n", g.nodes().size(),
              g.links().size(), s);
  EXPECT_LT(s, 2.0);
}

}  // namespace
}  // namespace weightport::topology
