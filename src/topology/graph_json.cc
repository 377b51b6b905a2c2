// Graph <-> JSON. Names, not indices, join nodes to domains and links to nodes; a link and the
// reverse link right after it with equal figures are written as one duplex entry (AddCable's shape),
// so FromJson(ToJson(g)) rebuilds the same links in the same order.
#include <cmath>
#include <limits>

#include "weightport/core/json_util.h"
#include "weightport/topology/graph.h"

namespace weightport::topology {
namespace {

using json_util::Json;

bool IsReverse(const Link& a, const Link& b) {
  return a.from == b.to && a.to == b.from && a.gbps == b.gbps && a.latency_us == b.latency_us &&
         a.cost == b.cost;
}

Result<double> ReadFigure(const Json& obj, const char* key, const std::string& path, bool positive) {
  WP_ASSIGN_OR_RETURN(double v, json_util::GetDouble(obj, key, path));
  if (!std::isfinite(v) || (positive ? !(v > 0) : !(v >= 0)))
    return InvalidArgument(path + ": field '" + key + "' must be " + (positive ? "> 0" : ">= 0") + " (got " +
                           obj.find(key)->dump() + ")");
  return v;
}

}  // namespace

nlohmann::json Graph::ToJson() const {
  Json domains = Json::array();
  for (const Domain& d : domains_) domains.push_back({{"name", d.name}, {"kind", DomainKindName(d.kind)}});
  Json nodes = Json::array();
  for (const Node& n : nodes_) {
    Json j = {{"name", n.name}, {"kind", NodeKindName(n.kind)}};
    if (n.hbd >= 0) j["hbd"] = domains_[n.hbd].name;
    if (n.host >= 0) j["host"] = domains_[n.host].name;
    if (n.rack >= 0) j["rack"] = domains_[n.rack].name;
    if (n.rail >= 0) j["rail"] = n.rail;
    nodes.push_back(std::move(j));
  }
  Json links = Json::array();
  for (size_t i = 0; i < links_.size(); ++i) {
    const Link& l = links_[i];
    const bool duplex = i + 1 < links_.size() && IsReverse(l, links_[i + 1]);
    links.push_back({{"from", nodes_[l.from].name},
                     {"to", nodes_[l.to].name},
                     {"gbps", l.gbps},
                     {"latency_us", l.latency_us},
                     {"cost", l.cost},
                     {"duplex", duplex}});
    if (duplex) ++i;
  }
  return {{"name", name_},
          {"params", params_},
          {"domains", std::move(domains)},
          {"nodes", std::move(nodes)},
          {"links", std::move(links)}};
}

Result<Graph> Graph::FromJson(const nlohmann::json& json) {
  const std::string root = "topology";
  WP_RETURN_IF_ERROR(json_util::CheckKeys(json, {"name", "params", "domains", "nodes", "links"}, root));
  WP_ASSIGN_OR_RETURN(std::string name, json_util::GetString(json, "name", root));
  Graph g(std::move(name));
  if (json.contains("params")) {
    WP_ASSIGN_OR_RETURN(const Json* params, json_util::GetObject(json, "params", root));
    g.set_params(*params);
  }

  // Domain names are unique within a kind ("node0" may be both a host and an HBD).
  std::unordered_map<std::string, int> domain_index[3];
  WP_ASSIGN_OR_RETURN(const Json* domains, json_util::GetArray(json, "domains", root));
  for (size_t i = 0; i < domains->size(); ++i) {
    const std::string path = json_util::At(root + ".domains", i);
    const Json& d = (*domains)[i];
    WP_RETURN_IF_ERROR(json_util::CheckKeys(d, {"name", "kind"}, path));
    WP_ASSIGN_OR_RETURN(std::string dname, json_util::GetString(d, "name", path));
    WP_ASSIGN_OR_RETURN(std::string kind_name, json_util::GetString(d, "kind", path));
    auto kind = ParseDomainKind(kind_name);
    if (!kind.ok()) return kind.status().WithContext(path);
    if (dname.empty()) return InvalidArgument(path + ": field 'name' is empty");
    if (domain_index[static_cast<int>(*kind)].count(dname))
      return InvalidArgument(path + ": " + kind_name + " domain '" + dname + "' appears twice");
    domain_index[static_cast<int>(*kind)].emplace(dname, g.AddDomain({.name = dname, .kind = *kind}));
  }

  WP_ASSIGN_OR_RETURN(const Json* nodes, json_util::GetArray(json, "nodes", root));
  g.nodes_.reserve(nodes->size());
  g.out_.reserve(nodes->size());
  for (size_t i = 0; i < nodes->size(); ++i) {
    const std::string path = json_util::At(root + ".nodes", i);
    const Json& n = (*nodes)[i];
    WP_RETURN_IF_ERROR(json_util::CheckKeys(n, {"name", "kind", "hbd", "host", "rack", "rail"}, path));
    Node node;
    WP_ASSIGN_OR_RETURN(node.name, json_util::GetString(n, "name", path));
    if (node.name.empty()) return InvalidArgument(path + ": field 'name' is empty");
    if (g.FindNode(node.name) >= 0) return InvalidArgument(path + ": node '" + node.name + "' appears twice");
    WP_ASSIGN_OR_RETURN(std::string kind_name, json_util::GetString(n, "kind", path));
    auto kind = ParseNodeKind(kind_name);
    if (!kind.ok()) return kind.status().WithContext(path);
    node.kind = *kind;
    const std::pair<const char*, DomainKind> refs[] = {
        {"hbd", DomainKind::kHbd}, {"host", DomainKind::kHost}, {"rack", DomainKind::kRack}};
    for (const auto& [key, dkind] : refs) {
      if (!n.contains(key)) continue;
      WP_ASSIGN_OR_RETURN(std::string dname, json_util::GetString(n, key, path));
      const auto& index = domain_index[static_cast<int>(dkind)];
      auto it = index.find(dname);
      if (it == index.end())
        return InvalidArgument(path + ": field '" + key + "': no " + DomainKindName(dkind) + " domain '" +
                               dname + "'");
      (dkind == DomainKind::kHbd    ? node.hbd
       : dkind == DomainKind::kHost ? node.host
                                    : node.rack) = it->second;
    }
    if (n.contains("rail")) {
      WP_ASSIGN_OR_RETURN(int64_t rail, json_util::GetI64(n, "rail", path));
      if (rail < 0 || rail > std::numeric_limits<int>::max())
        return InvalidArgument(path + ": field 'rail' must be >= 0 (omit it for no rail)");
      node.rail = static_cast<int>(rail);
    }
    g.AddNode(std::move(node));
  }

  WP_ASSIGN_OR_RETURN(const Json* links, json_util::GetArray(json, "links", root));
  g.links_.reserve(links->size() * 2);
  for (size_t i = 0; i < links->size(); ++i) {
    const std::string path = json_util::At(root + ".links", i);
    const Json& l = (*links)[i];
    WP_RETURN_IF_ERROR(json_util::CheckKeys(l, {"from", "to", "gbps", "latency_us", "cost", "duplex"}, path));
    int ends[2];
    const char* keys[2] = {"from", "to"};
    for (int e = 0; e < 2; ++e) {
      WP_ASSIGN_OR_RETURN(std::string node_name, json_util::GetString(l, keys[e], path));
      ends[e] = g.FindNode(node_name);
      if (ends[e] < 0)
        return InvalidArgument(path + ": field '" + keys[e] + "': no node '" + node_name + "'");
    }
    if (ends[0] == ends[1]) return InvalidArgument(path + ": a link from a node to itself");
    WP_ASSIGN_OR_RETURN(double gbps, ReadFigure(l, "gbps", path, /*positive=*/true));
    WP_ASSIGN_OR_RETURN(double latency_us, ReadFigure(l, "latency_us", path, /*positive=*/false));
    double cost = 1;
    if (l.contains("cost")) {
      WP_ASSIGN_OR_RETURN(cost, ReadFigure(l, "cost", path, /*positive=*/false));
    }
    bool duplex = false;
    if (l.contains("duplex")) {
      WP_ASSIGN_OR_RETURN(duplex, json_util::GetBool(l, "duplex", path));
    }
    if (duplex) {
      g.AddCable(ends[0], ends[1], gbps, latency_us, cost);
    } else {
      g.AddLink({.from = ends[0], .to = ends[1], .gbps = gbps, .latency_us = latency_us, .cost = cost});
    }
  }
  WP_RETURN_IF_ERROR(g.Validate());
  return g;
}

}  // namespace weightport::topology
