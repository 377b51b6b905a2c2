// A standalone SVG in tiers, top to bottom: spines, OCSes, leaves/ToRs, NICs, NVSwitch / PCIe
// switches, GPUs, host memory. Lines join drawn nodes that share a link; a title, a legend and the
// note on what was left out.
#include <algorithm>
#include <array>
#include <cmath>

#include "topology/render_internal.h"

namespace weightport::topology {
namespace {

using internal::FormatNumber;
using internal::XmlEscape;

constexpr int kTiers = 7;
constexpr int kSpacing = 120, kBoxW = 110, kBoxH = 26, kTierH = 90, kMargin = 20, kTop = 70;

int Tier(NodeKind kind) {
  switch (kind) {
    case NodeKind::kSpine:
      return 0;
    case NodeKind::kOcs:
      return 1;
    case NodeKind::kTor:
      return 2;
    case NodeKind::kNic:
      return 3;
    case NodeKind::kNvSwitch:
    case NodeKind::kPcieSwitch:
      return 4;
    case NodeKind::kGpu:
      return 5;
    case NodeKind::kHostMemory:
      return 6;
  }
  return 6;
}

const char* Color(NodeKind kind) { return internal::KindColor(kind, "#ffffff"); }

// Scale-up links green, scale-out (NIC and above) blue, the rest (PCIe) grey.
const char* LineColor(NodeKind a, NodeKind b) {
  auto up = [](NodeKind k) { return k == NodeKind::kNvSwitch || k == NodeKind::kOcs; };
  auto out = [](NodeKind k) { return k == NodeKind::kTor || k == NodeKind::kSpine; };
  if (up(a) || up(b) || (a == NodeKind::kGpu && b == NodeKind::kGpu)) return "#3a9a3a";
  if (out(a) || out(b)) return "#3a6ab0";
  return "#999999";
}

std::string Text(int x, int y, const std::string& s, int size, const char* anchor = "start") {
  return "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) + "\" font-size=\"" +
         std::to_string(size) + "\" text-anchor=\"" + anchor + "\">" + XmlEscape(s) + "</text>\n";
}

}  // namespace

std::string ToSvg(const Graph& graph, const DrawOptions& options) {
  const internal::Drawing d = internal::SelectForDrawing(graph, options);
  const auto& nodes = graph.nodes();
  std::array<int, kTiers> count{};
  std::vector<int> x(nodes.size(), 0), y(nodes.size(), 0);
  for (int i : d.nodes) {
    const int t = Tier(nodes[i].kind);
    x[i] = kMargin + count[t]++ * kSpacing + kBoxW / 2;
  }
  std::array<int, kTiers> row{};  // tiers that have nodes, packed upward
  int rows = 0;
  for (int t = 0; t < kTiers; ++t) row[t] = count[t] > 0 ? rows++ : rows;
  for (int i : d.nodes) y[i] = kTop + row[Tier(nodes[i].kind)] * kTierH;
  const int widest = std::max(*std::max_element(count.begin(), count.end()), 1);
  const int legend_y = kTop + std::max(rows, 1) * kTierH;
  const int width = std::max(kMargin * 2 + widest * kSpacing, 720);
  const int height = legend_y + 60;

  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
                    "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) +
                    " " + std::to_string(height) + "\" font-family=\"sans-serif\">\n";
  out += "<title>" + XmlEscape(graph.name()) + "</title>\n";
  out += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(width) + "\" height=\"" + std::to_string(height) +
         "\" fill=\"#ffffff\"/>\n";
  out += Text(kMargin, 24,
              graph.name() + ": " + std::to_string(nodes.size()) + " nodes, " +
                  std::to_string(graph.links().size()) + " links, " +
                  std::to_string(graph.Endpoints().size()) + " endpoints",
              16);
  if (!d.note.empty()) out += Text(kMargin, 44, d.note, 12);

  out += "<g id=\"links\" stroke-opacity=\"0.6\">\n";
  for (int l : d.edges) {
    const Link& link = graph.links()[l];
    const int a = link.from, b = link.to;
    const bool a_above = y[a] <= y[b];
    const int ya = y[a] + (a_above ? kBoxH / 2 : -kBoxH / 2), yb = y[b] + (a_above ? -kBoxH / 2 : kBoxH / 2);
    const double w = 1 + std::min(3.0, std::log2(1 + link.gbps / 400.0));
    out += "<line x1=\"" + std::to_string(x[a]) + "\" y1=\"" + std::to_string(y[a] == y[b] ? y[a] : ya) +
           "\" x2=\"" + std::to_string(x[b]) + "\" y2=\"" + std::to_string(y[a] == y[b] ? y[b] : yb) +
           "\" stroke=\"" + LineColor(nodes[a].kind, nodes[b].kind) + "\" stroke-width=\"" + FormatNumber(w) +
           "\"><title>" +
           XmlEscape(nodes[a].name + " - " + nodes[b].name + ": " + FormatNumber(link.gbps) +
                     " Gbit/s each way") +
           "</title></line>\n";
  }
  out += "</g>\n<g id=\"nodes\">\n";
  for (int i : d.nodes) {
    const Node& n = nodes[i];
    out += "<g><title>" + XmlEscape(n.name + " (" + NodeKindName(n.kind) + ")") + "</title>";
    out += "<rect x=\"" + std::to_string(x[i] - kBoxW / 2) + "\" y=\"" + std::to_string(y[i] - kBoxH / 2) +
           "\" width=\"" + std::to_string(kBoxW) + "\" height=\"" + std::to_string(kBoxH) +
           "\" rx=\"4\" fill=\"" + Color(n.kind) + "\" stroke=\"#333333\"/>";
    out += Text(x[i], y[i] + 4, n.name, 10, "middle");
    out += "</g>\n";
  }
  out += "</g>\n<g id=\"legend\">\n";
  int lx = kMargin;
  for (NodeKind k : {NodeKind::kSpine, NodeKind::kOcs, NodeKind::kTor, NodeKind::kNic, NodeKind::kNvSwitch,
                     NodeKind::kPcieSwitch, NodeKind::kGpu, NodeKind::kHostMemory}) {
    out += "<rect x=\"" + std::to_string(lx) + "\" y=\"" + std::to_string(legend_y) +
           "\" width=\"14\" height=\"14\" fill=\"" + Color(k) + "\" stroke=\"#333333\"/>";
    out += Text(lx + 18, legend_y + 12, NodeKindName(k), 11);
    lx += 110;
  }
  out += Text(kMargin, legend_y + 36, "lines: green scale-up fabric, blue DCN, grey PCIe / host", 11);
  out += "</g>\n</svg>\n";
  return out;
}

}  // namespace weightport::topology
