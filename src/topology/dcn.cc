#include "topology/dcn.h"

#include <algorithm>
#include <cmath>

namespace weightport::topology::internal {
namespace {

constexpr int kMaxAutoSpines = 32;

int RailsOf(const std::vector<DcnPort>& ports, bool rail_optimised) {
  int rails = 1;
  if (rail_optimised)
    for (const DcnPort& p : ports) rails = std::max(rails, p.rail + 1);
  return rails;
}

int GroupsOf(const std::vector<DcnPort>& ports) {
  int groups = 0;
  for (const DcnPort& p : ports) groups = std::max(groups, p.group + 1);
  return groups;
}

}  // namespace

int AutoSpines(int leaves, int max_ports_per_leaf, double oversubscription) {
  if (leaves <= 1) return 0;
  // Clamped as a double: a tiny oversubscription (1e-300) would overflow the cast to int.
  const double uplinks = std::ceil(max_ports_per_leaf / oversubscription - 1e-9);
  return static_cast<int>(std::clamp(uplinks, 1.0, static_cast<double>(kMaxAutoSpines)));
}

Result<DcnResult> AddDcn(Graph& graph, const std::vector<DcnPort>& ports, const DcnSpec& spec,
                         const std::string& preset) {
  const int rails = RailsOf(ports, spec.rail_optimised);
  const int groups = GroupsOf(ports);
  for (const DcnPort& p : ports)
    if (p.group < 0 || p.rail < 0 || p.nic < 0 || p.nic >= static_cast<int>(graph.nodes().size()))
      return Internal("preset '" + preset + "': bad DCN port for node " + std::to_string(p.nic));
  // Leaf slot per (group, rail): its node index once created; its rack (-2: unset, -1: mixed).
  const size_t slots = static_cast<size_t>(groups) * rails;
  std::vector<int> leaf(slots, -1), rack(slots, -2), ports_on(slots, 0);
  auto slot_of = [&](const DcnPort& p) {
    return static_cast<size_t>(p.group) * rails + (spec.rail_optimised ? p.rail : 0);
  };
  for (const DcnPort& p : ports) {
    const size_t s = slot_of(p);
    const int nic_rack = graph.nodes()[p.nic].rack;
    rack[s] = rack[s] == -2 ? nic_rack : (rack[s] == nic_rack ? rack[s] : -1);
    ++ports_on[s];
  }
  DcnResult result;
  int max_ports = 0;
  for (size_t s = 0; s < slots; ++s) {
    if (ports_on[s] == 0) continue;
    const int g = static_cast<int>(s / rails), r = static_cast<int>(s % rails);
    Node node;
    node.name = spec.rail_optimised ? "su" + std::to_string(g) + "/leaf-rail" + std::to_string(r)
                                    : "tor" + std::to_string(g);
    node.kind = NodeKind::kTor;
    node.rack = std::max(rack[s], -1);
    node.rail = spec.rail_optimised ? r : -1;
    leaf[s] = graph.AddNode(std::move(node));
    ++result.leaves;
    max_ports = std::max(max_ports, ports_on[s]);
  }
  result.spines =
      spec.spines >= 0 ? spec.spines : AutoSpines(result.leaves, max_ports, spec.oversubscription);
  if (result.spines == 0 && result.leaves > 1)
    return InvalidArgument("preset '" + preset + "': parameter 'spines' must be >= 1: there are " +
                           std::to_string(result.leaves) + " leaves to join");
  std::vector<int> spine(result.spines);
  for (int s = 0; s < result.spines; ++s)
    spine[s] = graph.AddNode({.name = "spine" + std::to_string(s), .kind = NodeKind::kSpine});
  for (const DcnPort& p : ports) graph.AddCable(p.nic, leaf[slot_of(p)], spec.nic_gbps, spec.nic_latency_us);
  for (size_t s = 0; s < slots; ++s) {
    if (leaf[s] < 0) continue;
    const double uplink = ports_on[s] * spec.nic_gbps / result.spines / spec.oversubscription;
    for (int sp : spine) graph.AddCable(leaf[s], sp, uplink, spec.switch_latency_us);
  }
  return result;
}

}  // namespace weightport::topology::internal
