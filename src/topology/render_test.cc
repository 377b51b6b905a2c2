#include "weightport/topology/render.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "weightport/topology/presets.h"

// A namespace of its own: the unity build compiles this file together with other tests.
namespace weightport::topology::render_test {
namespace {

using nlohmann::json;

Graph Make(const std::string& name, const json& params = json::object()) {
  auto g = MakePreset(name, params);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : Graph();
}

bool Has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// Every start tag closed in order; self-closing tags allowed. Returns "" or what is wrong.
std::string CheckTags(const std::string& svg) {
  std::vector<std::string> open;
  for (size_t i = svg.find('<'); i != std::string::npos; i = svg.find('<', i + 1)) {
    const size_t end = svg.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    const std::string tag = svg.substr(i + 1, end - i - 1);
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "unexpected </" + tag.substr(1) + ">";
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
  }
  return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

TEST(Render, SummaryOfEachPreset) {
  struct Want {
    std::string preset;
    int endpoints;
    double hbd, dcn;
    int largest_hbd;
  };
  for (const Want& w : std::vector<Want>{{"dgx-h100", 16, 3600, 400, 8},
                                         {"gb200-nvl72", 144, 7200, 400, 72},
                                         {"tpuv4", 128, 2400, 50, 64},  // a 200G NIC per 4 chips
                                         {"infinitehbd", 32, 3600, 400, 32},
                                         {"fat-tree", 8, 0, 100, 0}}) {
    const json s = Summarize(Make(w.preset));
    EXPECT_EQ(s["name"], w.preset);
    EXPECT_EQ(s["endpoints"], w.endpoints) << w.preset;
    EXPECT_EQ(s["endpoint_hbd_gbps"], w.hbd) << w.preset;
    EXPECT_EQ(s["endpoint_dcn_gbps"], w.dcn) << w.preset;
    EXPECT_EQ(s["largest_hbd"], w.largest_hbd) << w.preset;
  }
  const json s = Summarize(Make("dgx-h100"));
  EXPECT_EQ(s["nodes"],
            json({{"gpu", 16}, {"nic", 16}, {"nvswitch", 2}, {"host_memory", 2}, {"tor", 8}, {"spine", 2}}));
  EXPECT_EQ(s["links"], 160);
  EXPECT_EQ(s["domains"], json({{"host", 2}, {"hbd", 2}, {"rack", 1}}));
  EXPECT_EQ(s["params"]["nodes"], 2);
  EXPECT_EQ(Summarize(Make("fat-tree", {{"gpus_per_host", 4}}))["endpoint_dcn_gbps"], 25);
}

TEST(Render, SummaryMedianOfMixedEndpoints) {
  Graph g("mixed");
  const int nic = g.AddNode({.name = "nic", .kind = NodeKind::kNic});
  const int tor = g.AddNode({.name = "tor", .kind = NodeKind::kTor});
  g.AddCable(nic, tor, 100, 1);
  for (int i = 0; i < 4; ++i) {
    const int gpu = g.AddNode({.name = "gpu" + std::to_string(i), .kind = NodeKind::kGpu});
    if (i > 0) g.AddCable(gpu, gpu - 1, 100.0 * i, 0);
    if (i < 2) g.AddCable(gpu, nic, 64, 0);
  }
  // HBD: 100, 300, 500, 300 -> median 300; DCN: 50, 50, 0, 0 -> 25.
  const json s = Summarize(g);
  EXPECT_EQ(s["endpoint_hbd_gbps"], 300);
  EXPECT_EQ(s["endpoint_dcn_gbps"], 25);
  EXPECT_EQ(s["largest_hbd"], 0);
  EXPECT_EQ(Summarize(Graph("empty"))["endpoints"], 0);
}

TEST(Render, DotHasEveryNodeOfASmallGraph) {
  for (const std::string preset : {"dgx-h100", "tpuv4", "gb200-nvl72", "infinitehbd", "fat-tree"}) {
    Graph g = Make(preset, preset == "gb200-nvl72" ? json{{"gpus_per_rack", 8}} : json::object());
    const std::string dot = ToDot(g, {.max_domains = 1000});
    EXPECT_TRUE(dot.starts_with("graph \"" + preset + "\" {")) << dot.substr(0, 40);
    EXPECT_TRUE(dot.ends_with("}\n"));
    EXPECT_EQ(std::count(dot.begin(), dot.end(), '{'), std::count(dot.begin(), dot.end(), '}')) << preset;
    for (const Node& n : g.nodes()) EXPECT_TRUE(Has(dot, "\"" + n.name + "\" [shape=")) << n.name;
    EXPECT_FALSE(Has(dot, "showing")) << preset;
  }
  const std::string dot = ToDot(Make("dgx-h100"));
  EXPECT_TRUE(Has(dot, "subgraph \"cluster_hbd_2\" {"));
  EXPECT_TRUE(Has(dot, "label=\"host node0\";"));
  EXPECT_TRUE(Has(dot, "\"node0/gpu0\" [shape=box"));
  EXPECT_TRUE(Has(dot, "\"node0/mem\" [shape=cylinder"));
  EXPECT_TRUE(Has(dot, "\"node0/gpu0\" -- \"node0/nvswitch\" [label=\"3600\"];"));
  // One edge per cable: 80 cables.
  size_t edges = 0;
  for (size_t i = dot.find(" -- "); i != std::string::npos; i = dot.find(" -- ", i + 1)) ++edges;
  EXPECT_EQ(edges, 80u);
}

TEST(Render, LargeGraphsAreDrawnInPart) {
  Graph g = Make("dgx-h100", {{"nodes", 1024}});  // 256 leaves + 32 spines: switches are capped
  const std::string dot = ToDot(g, {.max_domains = 2});
  EXPECT_TRUE(Has(dot, "\"node1/gpu7\" [shape="));
  EXPECT_FALSE(Has(dot, "\"node2/gpu0\""));
  EXPECT_TRUE(Has(dot, "\"su0/leaf-rail7\" [shape="));
  EXPECT_TRUE(Has(dot, "\"spine31\" [shape="));
  EXPECT_FALSE(Has(dot, "\"su1/leaf-rail0\""));
  EXPECT_TRUE(Has(dot, "showing 76 of ")) << dot.substr(0, 300);
  EXPECT_TRUE(Has(dot, "2 of 1024 hosts, 40 of 288 switches"));
  const std::string svg = ToSvg(g, {.max_domains = 2});
  EXPECT_EQ(CheckTags(svg), "");
  EXPECT_TRUE(Has(svg, ">node1/gpu7</text>"));
  EXPECT_FALSE(Has(svg, ">node2/gpu0<"));
  EXPECT_TRUE(Has(svg, "2 of 1024 hosts"));
}

TEST(Render, SvgIsWellFormedAndHasTheNodes) {
  for (const PresetInfo& info : Presets()) {
    Graph g = Make(info.name);
    const std::string svg = ToSvg(g);
    EXPECT_TRUE(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"")) << info.name;
    EXPECT_TRUE(svg.ends_with("</svg>\n"));
    EXPECT_EQ(CheckTags(svg), "") << info.name;
    EXPECT_TRUE(Has(svg, "<title>" + info.name + "</title>"));
    EXPECT_TRUE(Has(svg, ">host_memory</text>"));  // the legend
  }
  const std::string svg = ToSvg(Make("dgx-h100"));
  for (const std::string name : {"node0/gpu0", "node1/nic7", "su0/leaf-rail0", "spine1", "node1/mem"})
    EXPECT_TRUE(Has(svg, ">" + name + "</text>")) << name;
  // Tiers: spines above leaves above NICs above GPUs above host memory.
  auto y_of = [&](const std::string& name) {
    const size_t at = svg.find(">" + name + "</text>");
    const size_t y = svg.rfind(" y=\"", at);
    return std::stoi(svg.substr(y + 4));
  };
  EXPECT_LT(y_of("spine0"), y_of("su0/leaf-rail0"));
  EXPECT_LT(y_of("su0/leaf-rail0"), y_of("node0/nic0"));
  EXPECT_LT(y_of("node0/nic0"), y_of("node0/nvswitch"));
  EXPECT_LT(y_of("node0/nvswitch"), y_of("node0/gpu0"));
  EXPECT_LT(y_of("node0/gpu0"), y_of("node0/mem"));
}

TEST(Render, EscapesNames) {
  Graph g("a<b & \"c\"");
  const int x = g.AddNode({.name = "x<1>", .kind = NodeKind::kGpu});
  const int y = g.AddNode({.name = "y\"q\\", .kind = NodeKind::kHostMemory});
  g.AddCable(x, y, 10, 0);
  const std::string svg = ToSvg(g);
  EXPECT_EQ(CheckTags(svg), "");
  EXPECT_TRUE(Has(svg, "a&lt;b &amp; &quot;c&quot;"));
  EXPECT_TRUE(Has(svg, ">x&lt;1&gt;</text>"));
  EXPECT_FALSE(Has(svg, "x<1>"));
  const std::string dot = ToDot(g);
  EXPECT_TRUE(Has(dot, "graph \"a<b & \\\"c\\\"\" {"));
  EXPECT_TRUE(Has(dot, "\"y\\\"q\\\\\" [shape=cylinder"));
}

}  // namespace
}  // namespace weightport::topology::render_test
