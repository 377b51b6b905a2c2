// Graphviz DOT: one node per drawn graph node (label = name, shape by kind), host domains as
// clusters nested in their HBD's cluster, one undirected edge per cable labelled with its Gbit/s.
#include <unordered_map>

#include "topology/render_internal.h"

namespace weightport::topology {
namespace {

using internal::FormatNumber;

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

const char* Shape(NodeKind kind) {
  switch (kind) {
    case NodeKind::kGpu:
      return "box";
    case NodeKind::kHostMemory:
      return "cylinder";
    case NodeKind::kNic:
      return "component";
    case NodeKind::kNvSwitch:
      return "hexagon";
    case NodeKind::kPcieSwitch:
      return "octagon";
    case NodeKind::kTor:
      return "trapezium";
    case NodeKind::kSpine:
      return "invtrapezium";
    case NodeKind::kOcs:
      return "doublecircle";
  }
  return "ellipse";
}

void NodeLine(const Graph& graph, int i, const std::string& indent, std::string& out) {
  const Node& n = graph.nodes()[i];
  out += indent + Quote(n.name) + " [shape=" + Shape(n.kind) +
         ", fillcolor=" + Quote(internal::KindColor(n.kind, "white")) + "];\n";
}

}  // namespace

std::string ToDot(const Graph& graph, const DrawOptions& options) {
  const internal::Drawing d = internal::SelectForDrawing(graph, options);
  const auto& nodes = graph.nodes();
  const auto& domains = graph.domains();
  // Which HBD cluster a host cluster sits in: the HBD all its drawn members share, if any.
  std::unordered_map<int, int> host_parent;  // host -> hbd, -1: members disagree
  for (int i : d.nodes) {
    const Node& n = nodes[i];
    if (n.host < 0 || n.hbd < 0) continue;
    auto [it, inserted] = host_parent.emplace(n.host, n.hbd);
    if (!inserted && it->second != n.hbd) it->second = -1;
  }
  std::vector<int> hbd_order, host_order, top;
  std::unordered_map<int, std::vector<int>> in_host, in_hbd, hosts_in_hbd;
  for (int i : d.nodes) {
    const Node& n = nodes[i];
    if (n.host >= 0) {
      auto& v = in_host[n.host];
      if (v.empty()) {
        host_order.push_back(n.host);
        auto it = host_parent.find(n.host);
        const int parent = it == host_parent.end() ? -1 : it->second;
        if (parent >= 0) {
          if (in_hbd[parent].empty() && hosts_in_hbd[parent].empty()) hbd_order.push_back(parent);
          hosts_in_hbd[parent].push_back(n.host);
        }
      }
      v.push_back(i);
    } else if (n.hbd >= 0) {
      if (in_hbd[n.hbd].empty() && hosts_in_hbd[n.hbd].empty()) hbd_order.push_back(n.hbd);
      in_hbd[n.hbd].push_back(i);
    } else {
      top.push_back(i);
    }
  }
  std::string out = "graph " + Quote(graph.name()) + " {\n";
  std::string label = graph.name() + ": " + std::to_string(nodes.size()) + " nodes, " +
                      std::to_string(graph.links().size()) + " links";
  if (!d.note.empty()) label += "\n" + d.note;
  out += "  graph [label=" + Quote(label) + ", labelloc=t, fontsize=14, newrank=true];\n";
  out += "  node [style=filled, fontsize=10];\n";
  auto host_cluster = [&](int h, const std::string& indent) {
    out += indent + "subgraph " + Quote("cluster_host_" + std::to_string(h)) + " {\n";
    out += indent + "  label=" + Quote("host " + domains[h].name) + ";\n";
    for (int i : in_host[h]) NodeLine(graph, i, indent + "  ", out);
    out += indent + "}\n";
  };
  std::unordered_map<int, char> host_done;
  for (int b : hbd_order) {
    out += "  subgraph " + Quote("cluster_hbd_" + std::to_string(b)) + " {\n";
    out += "    label=" + Quote("hbd " + domains[b].name) + ";\n    style=dashed;\n";
    for (int h : hosts_in_hbd[b]) {
      host_cluster(h, "    ");
      host_done[h] = 1;
    }
    for (int i : in_hbd[b]) NodeLine(graph, i, "    ", out);
    out += "  }\n";
  }
  for (int h : host_order)
    if (!host_done.count(h)) host_cluster(h, "  ");
  for (int i : top) NodeLine(graph, i, "  ", out);
  for (int l : d.edges) {
    const Link& link = graph.links()[l];
    out += "  " + Quote(nodes[link.from].name) + " -- " + Quote(nodes[link.to].name) +
           " [label=" + Quote(FormatNumber(link.gbps)) + "];\n";
  }
  out += "}\n";
  return out;
}

}  // namespace weightport::topology
