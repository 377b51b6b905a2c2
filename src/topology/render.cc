#include "weightport/topology/render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "topology/render_internal.h"

namespace weightport::topology {
namespace {

// Kinds whose links make up an endpoint's high-bandwidth (scale-up) fabric.
bool IsHbdFabricKind(NodeKind kind) {
  return kind == NodeKind::kGpu || kind == NodeKind::kNvSwitch || kind == NodeKind::kOcs;
}

bool IsSwitchKind(NodeKind kind) { return !IsEndpointKind(kind) && kind != NodeKind::kNic; }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  const double lower = *std::max_element(v.begin(), v.begin() + mid);
  return (lower + upper) / 2;
}

}  // namespace

namespace internal {

const char* KindColor(NodeKind kind, const char* unknown) {
  switch (kind) {
    case NodeKind::kGpu:
      return "#b7e1a1";
    case NodeKind::kHostMemory:
      return "#f3e3a3";
    case NodeKind::kNic:
      return "#a9c8ec";
    case NodeKind::kNvSwitch:
      return "#7fc97f";
    case NodeKind::kPcieSwitch:
      return "#d0d0d0";
    case NodeKind::kTor:
      return "#8fb3de";
    case NodeKind::kSpine:
      return "#6a8fc7";
    case NodeKind::kOcs:
      return "#e6a1c8";
  }
  return unknown;
}

std::string FormatNumber(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  std::string s(buf);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

Drawing SelectForDrawing(const Graph& graph, const DrawOptions& options) {
  const auto& nodes = graph.nodes();
  const int n = static_cast<int>(nodes.size());
  Drawing d;
  d.drawn.assign(n, 0);
  // Host domains: the first max_domains of them, in domain order.
  std::vector<char> host_drawn(graph.domains().size(), 0), hbd_reached(graph.domains().size(), 0);
  int hosts_total = 0, hosts_drawn = 0;
  for (size_t i = 0; i < graph.domains().size(); ++i) {
    if (graph.domains()[i].kind != DomainKind::kHost) continue;
    ++hosts_total;
    if (hosts_drawn < options.max_domains) host_drawn[i] = 1, ++hosts_drawn;
  }
  int loose = 0;  // non-switch nodes outside any host
  for (int i = 0; i < n; ++i) {
    const Node& node = nodes[i];
    if (node.host >= 0) {
      d.drawn[i] = host_drawn[node.host];
    } else if (!IsSwitchKind(node.kind) && node.hbd < 0) {
      d.drawn[i] = loose++ < std::max(options.max_domains, 1) * 16;
    }
    if (d.drawn[i] && node.hbd >= 0) hbd_reached[node.hbd] = 1;
  }
  // Outside hosts: HBD members whose HBD is drawn, then switches.
  std::vector<int> switches;
  for (int i = 0; i < n; ++i) {
    const Node& node = nodes[i];
    if (node.host >= 0 || d.drawn[i]) continue;
    if (node.hbd >= 0) {
      d.drawn[i] = hbd_reached[node.hbd];
    } else if (IsSwitchKind(node.kind)) {
      switches.push_back(i);
    }
  }
  int switches_drawn = 0;
  if (static_cast<int>(switches.size()) <= kMaxDrawnSwitches) {
    for (int s : switches) d.drawn[s] = 1;
    switches_drawn = static_cast<int>(switches.size());
  } else {
    // Rings outward from what is drawn: a switch next to a drawn node, then next to those.
    for (int round = 0; round < 2 && switches_drawn < kMaxDrawnSwitches; ++round) {
      std::vector<int> add;
      for (int s : switches) {
        if (d.drawn[s]) continue;
        for (int l : graph.out_links(s)) {
          if (d.drawn[graph.links()[l].to]) {
            add.push_back(s);
            break;
          }
        }
      }
      for (int s : add) {
        if (switches_drawn >= kMaxDrawnSwitches) break;
        d.drawn[s] = 1;
        ++switches_drawn;
      }
    }
  }
  for (int i = 0; i < n; ++i)
    if (d.drawn[i]) d.nodes.push_back(i);
  std::unordered_set<uint64_t> pairs;
  for (int i : d.nodes) {
    for (int l : graph.out_links(i)) {
      const int j = graph.links()[l].to;
      if (!d.drawn[j]) continue;
      const uint64_t key =
          (static_cast<uint64_t>(std::min(i, j)) << 32) | static_cast<uint32_t>(std::max(i, j));
      if (pairs.insert(key).second) d.edges.push_back(l);
    }
  }
  if (static_cast<int>(d.nodes.size()) < n) {
    d.note = "showing " + std::to_string(d.nodes.size()) + " of " + std::to_string(n) +
             " nodes: " + std::to_string(hosts_drawn) + " of " + std::to_string(hosts_total) + " hosts, " +
             std::to_string(switches_drawn) + " of " + std::to_string(switches.size()) + " switches";
  }
  return d;
}

}  // namespace internal

std::string XmlEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

nlohmann::json Summarize(const Graph& graph) {
  const auto& nodes = graph.nodes();
  const auto& links = graph.links();
  nlohmann::json node_counts = nlohmann::json::object(), domain_counts = nlohmann::json::object();
  for (const Node& n : nodes) {
    auto& c = node_counts[NodeKindName(n.kind)];
    c = c.is_null() ? 1 : c.get<int64_t>() + 1;
  }
  for (const Domain& d : graph.domains()) {
    auto& c = domain_counts[DomainKindName(d.kind)];
    c = c.is_null() ? 1 : c.get<int64_t>() + 1;
  }
  const std::vector<int> endpoints = graph.Endpoints();
  std::vector<double> hbd, dcn;
  std::vector<int64_t> per_hbd(graph.domains().size(), 0);
  hbd.reserve(endpoints.size());
  dcn.reserve(endpoints.size());
  for (int e : endpoints) {
    double hbd_gbps = 0, dcn_gbps = 0;
    for (int l : graph.out_links(e)) {
      const int nb = links[l].to;
      if (IsHbdFabricKind(nodes[nb].kind)) hbd_gbps += links[l].gbps;
      if (nodes[nb].kind != NodeKind::kNic) continue;
      // The NIC's uplink, shared by the endpoints of this kind that hang off it.
      double uplink = 0;
      int sharers = 0;
      for (int m : graph.out_links(nb)) {
        const NodeKind k = nodes[links[m].to].kind;
        if (k == NodeKind::kTor || k == NodeKind::kSpine) uplink += links[m].gbps;
        sharers += k == nodes[e].kind;
      }
      dcn_gbps += uplink / std::max(sharers, 1);
    }
    hbd.push_back(hbd_gbps);
    dcn.push_back(dcn_gbps);
    if (nodes[e].hbd >= 0) ++per_hbd[nodes[e].hbd];
  }
  int64_t largest_hbd = 0;
  for (int64_t c : per_hbd) largest_hbd = std::max(largest_hbd, c);
  return {{"name", graph.name()},
          {"params", graph.params()},
          {"nodes", std::move(node_counts)},
          {"links", links.size()},
          {"domains", std::move(domain_counts)},
          {"endpoints", endpoints.size()},
          {"endpoint_hbd_gbps", Median(std::move(hbd))},
          {"endpoint_dcn_gbps", Median(std::move(dcn))},
          {"largest_hbd", largest_hbd}};
}

}  // namespace weightport::topology
