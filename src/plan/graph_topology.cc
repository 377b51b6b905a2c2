#include "weightport/plan/graph_topology.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace weightport {

using topology::Graph;
using topology::NodeKind;

namespace {

bool IsSwitch(NodeKind k) { return k == NodeKind::kTor || k == NodeKind::kSpine || k == NodeKind::kOcs; }

// The domain a node plans in: its HBD when that is switched (every member one hop from an
// NVSwitch, so any two members copy at full bandwidth), else its host, else the node itself (as
// -1 - node). A ring or torus HBD is not one "host": its far members are many hops apart.
int PlanningDomain(const Graph& g, int node) {
  const topology::Node& n = g.nodes()[node];
  bool switched = false;
  for (int l : g.out_links(node)) switched |= g.nodes()[g.links()[l].to].kind == NodeKind::kNvSwitch;
  if (n.hbd >= 0 && switched) return n.hbd;
  if (n.host >= 0) return n.host;
  return -1 - node;
}

std::string DomainName(const Graph& g, int domain) {
  return domain >= 0 ? g.domains()[domain].name : g.nodes()[-1 - domain].name;
}

}  // namespace

Result<Topology> PlannerTopology(const Graph& graph, const std::vector<int>& src_nodes,
                                 const std::vector<int>& dst_nodes) {
  const int n = static_cast<int>(graph.nodes().size());
  // Per domain: NICs (by node) and the HBD bandwidth of its endpoints.
  std::map<int, std::set<int>> nics;
  std::map<int, double> hbd_gbps;
  for (int e : graph.Endpoints()) {
    const int d = PlanningDomain(graph, e);
    for (int l : graph.out_links(e)) {
      const topology::Link& link = graph.links()[l];
      const NodeKind k = graph.nodes()[link.to].kind;
      if (k == NodeKind::kNic) {
        nics[d].insert(link.to);
      } else if (k != NodeKind::kHostMemory && !IsSwitch(k)) {
        hbd_gbps[d] += link.gbps;  // NVSwitch, PCIe switch inside the domain, or a GPU/chip neighbour
      }
    }
  }
  auto nic_gbps = [&](int d) {
    double sum = 0;
    for (int nic : nics[d])
      for (int l : graph.out_links(nic))
        if (IsSwitch(graph.nodes()[graph.links()[l].to].kind)) sum += graph.links()[l].gbps;
    return sum;
  };
  std::map<int, HostSpec> hosts;
  auto place = [&](const std::vector<int>& nodes, bool source) -> Status {
    for (size_t r = 0; r < nodes.size(); ++r) {
      const int node = nodes[r];
      if (node < 0 || node >= n)
        return InvalidArgument(std::string(source ? "src" : "dst") + " rank " + std::to_string(r) +
                               ": node " + std::to_string(node) + " is outside topology '" + graph.name() +
                               "'");
      const int d = PlanningDomain(graph, node);
      HostSpec& h = hosts[d];
      if (h.name.empty()) {
        h.name = DomainName(graph, d);
        h.nic_gbps = nic_gbps(d);
        if (h.nic_gbps <= 0) h.nic_gbps = Topology::kDefaultNicGbps;
      }
      (source ? h.src_ranks : h.dst_ranks).push_back(static_cast<int>(r));
    }
    return Status::Ok();
  };
  WP_RETURN_IF_ERROR(place(src_nodes, true));
  WP_RETURN_IF_ERROR(place(dst_nodes, false));
  double intra = 0;
  for (const auto& [d, h] : hosts)
    if (hbd_gbps[d] > 0) intra = intra == 0 ? hbd_gbps[d] : std::min(intra, hbd_gbps[d]);
  if (intra <= 0) intra = Topology::kDefaultIntraHostGbps;
  std::vector<HostSpec> list;
  for (auto& [d, h] : hosts) list.push_back(std::move(h));
  return Topology::Make(std::move(list), Topology::kDefaultNicGbps, intra);
}

}  // namespace weightport
