#include "weightport/topology/graph.h"

#include <cmath>
#include <utility>

namespace weightport::topology {
namespace {

constexpr std::pair<NodeKind, const char*> kNodeKinds[] = {
    {NodeKind::kGpu, "gpu"},
    {NodeKind::kHostMemory, "host_memory"},
    {NodeKind::kNic, "nic"},
    {NodeKind::kNvSwitch, "nvswitch"},
    {NodeKind::kPcieSwitch, "pcie_switch"},
    {NodeKind::kTor, "tor"},
    {NodeKind::kSpine, "spine"},
    {NodeKind::kOcs, "ocs"},
};
constexpr std::pair<DomainKind, const char*> kDomainKinds[] = {
    {DomainKind::kHbd, "hbd"}, {DomainKind::kHost, "host"}, {DomainKind::kRack, "rack"}};

template <typename Kind, size_t N>
const char* KindName(const std::pair<Kind, const char*> (&table)[N], Kind kind) {
  for (const auto& [k, name] : table)
    if (k == kind) return name;
  return "unknown";
}

// The kind of that name; else an error naming `what` and the known names.
template <typename Kind, size_t N>
Result<Kind> ParseKind(const std::pair<Kind, const char*> (&table)[N], std::string_view name,
                       const char* what) {
  for (const auto& [k, n] : table)
    if (name == n) return k;
  std::string known;
  for (const auto& [k, n] : table) known += (known.empty() ? "" : ", ") + std::string(n);
  return InvalidArgument("unknown " + std::string(what) + " '" + std::string(name) + "' (known: " + known +
                         ")");
}

std::string NodeWhat(const Graph& g, int i) {
  return "node " + std::to_string(i) + " '" + g.nodes()[i].name + "'";
}

std::string LinkWhat(const Graph& g, int i) {
  const Link& l = g.links()[i];
  const int n = static_cast<int>(g.nodes().size());
  auto end = [&](int x) {
    return x >= 0 && x < n ? "'" + g.nodes()[x].name + "'" : "node " + std::to_string(x);
  };
  return "link " + std::to_string(i) + " (" + end(l.from) + " -> " + end(l.to) + ")";
}

}  // namespace

const char* NodeKindName(NodeKind kind) { return KindName(kNodeKinds, kind); }

Result<NodeKind> ParseNodeKind(std::string_view name) { return ParseKind(kNodeKinds, name, "node kind"); }

const char* DomainKindName(DomainKind kind) { return KindName(kDomainKinds, kind); }

Result<DomainKind> ParseDomainKind(std::string_view name) {
  return ParseKind(kDomainKinds, name, "domain kind");
}

int Graph::AddDomain(Domain domain) {
  domains_.push_back(std::move(domain));
  return static_cast<int>(domains_.size()) - 1;
}

int Graph::AddNode(Node node) {
  const int index = static_cast<int>(nodes_.size());
  by_name_.emplace(node.name, index);  // the first of a duplicated name wins; Validate reports it
  nodes_.push_back(std::move(node));
  out_.emplace_back();
  return index;
}

int Graph::AddLink(Link link) {
  const int index = static_cast<int>(links_.size());
  // A link from a node that does not exist is kept (Validate names it) but indexes nowhere.
  if (link.from >= 0 && link.from < static_cast<int>(out_.size())) out_[link.from].push_back(index);
  links_.push_back(link);
  return index;
}

int Graph::AddCable(int a, int b, double gbps, double latency_us, double cost) {
  const int first = AddLink({.from = a, .to = b, .gbps = gbps, .latency_us = latency_us, .cost = cost});
  AddLink({.from = b, .to = a, .gbps = gbps, .latency_us = latency_us, .cost = cost});
  return first;
}

int Graph::FindNode(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? -1 : it->second;
}

std::vector<int> Graph::Endpoints() const {
  std::vector<int> gpus, memories;
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    if (nodes_[i].kind == NodeKind::kGpu) gpus.push_back(i);
    if (nodes_[i].kind == NodeKind::kHostMemory) memories.push_back(i);
  }
  return gpus.empty() ? memories : gpus;
}

Status Graph::Validate() const {
  const std::string ctx = "topology '" + name_ + "'";
  const int num_domains = static_cast<int>(domains_.size());
  std::unordered_map<std::string, int> domain_names[3];
  for (int d = 0; d < num_domains; ++d) {
    const Domain& dom = domains_[d];
    const std::string what = ctx + ": domain " + std::to_string(d) + " '" + dom.name + "'";
    if (dom.name.empty()) return InvalidArgument(what + ": the name is empty");
    const int k = static_cast<int>(dom.kind);
    if (k < 0 || k > 2) return InvalidArgument(what + ": unknown kind");
    auto [it, inserted] = domain_names[k].emplace(dom.name, d);
    if (!inserted)
      return InvalidArgument(what + ": the name is also " + DomainKindName(dom.kind) + " domain " +
                             std::to_string(it->second));
  }
  if (by_name_.size() != nodes_.size() || out_.size() != nodes_.size()) {
    // Some name appears twice (or is indexed wrongly): find which.
    std::unordered_map<std::string_view, int> seen;
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
      auto [it, inserted] = seen.emplace(nodes_[i].name, i);
      if (!inserted)
        return InvalidArgument(ctx + ": " + NodeWhat(*this, i) + ": the name is also node " +
                               std::to_string(it->second));
    }
    return Internal(ctx + ": the node index is inconsistent");
  }
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    const Node& n = nodes_[i];
    if (n.name.empty()) return InvalidArgument(ctx + ": node " + std::to_string(i) + ": the name is empty");
    if (NodeKindName(n.kind) == std::string_view("unknown"))
      return InvalidArgument(ctx + ": " + NodeWhat(*this, i) + ": unknown kind");
    const std::pair<int, DomainKind> refs[] = {
        {n.hbd, DomainKind::kHbd}, {n.host, DomainKind::kHost}, {n.rack, DomainKind::kRack}};
    for (const auto& [d, kind] : refs) {
      if (d == -1) continue;
      if (d < 0 || d >= num_domains)
        return InvalidArgument(ctx + ": " + NodeWhat(*this, i) + ": " + DomainKindName(kind) + " domain " +
                               std::to_string(d) + " is out of range (" + std::to_string(num_domains) +
                               " domains)");
      if (domains_[d].kind != kind)
        return InvalidArgument(ctx + ": " + NodeWhat(*this, i) + ": its " + DomainKindName(kind) +
                               " domain '" + domains_[d].name + "' is a " + DomainKindName(domains_[d].kind) +
                               " domain");
    }
    if (n.rail < -1) return InvalidArgument(ctx + ": " + NodeWhat(*this, i) + ": rail is negative");
  }
  const int num_nodes = static_cast<int>(nodes_.size());
  for (int i = 0; i < static_cast<int>(links_.size()); ++i) {
    const Link& l = links_[i];
    const std::string what = ctx + ": " + LinkWhat(*this, i);
    if (l.from < 0 || l.from >= num_nodes || l.to < 0 || l.to >= num_nodes)
      return InvalidArgument(what + ": node index out of range (" + std::to_string(num_nodes) + " nodes)");
    if (l.from == l.to) return InvalidArgument(what + ": a link from a node to itself");
    if (!(l.gbps > 0) || !std::isfinite(l.gbps))
      return InvalidArgument(what + ": bandwidth must be positive (" + std::to_string(l.gbps) + " Gbps)");
    if (!(l.latency_us >= 0) || !std::isfinite(l.latency_us))
      return InvalidArgument(what + ": latency must be >= 0 (" + std::to_string(l.latency_us) + " us)");
    if (!(l.cost >= 0) || !std::isfinite(l.cost))
      return InvalidArgument(what + ": cost must be >= 0 (" + std::to_string(l.cost) + ")");
  }
  return Status::Ok();
}

}  // namespace weightport::topology
