#include "sim/flows.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include "weightport/topology/routing.h"

namespace weightport::sim {
namespace {

using topology::Graph;

Result<int> NodeOf(const EndpointMap& endpoints, const Graph& graph, Endpoint e) {
  const std::vector<int>& nodes = e.side == PlanSide::kSource ? endpoints.src_nodes : endpoints.dst_nodes;
  if (e.rank < 0 || static_cast<size_t>(e.rank) >= nodes.size())
    return InvalidArgument(e.ToString() + " has no node in the endpoint map (" +
                           std::to_string(nodes.size()) + " " + PlanSideName(e.side) + " ranks mapped)");
  const int node = nodes[e.rank];
  if (node < 0 || static_cast<size_t>(node) >= graph.nodes().size())
    return InvalidArgument(e.ToString() + " is mapped to node " + std::to_string(node) +
                           ", outside topology '" + graph.name() + "'");
  return node;
}

// Kahn's order over leader -> follower edges. Steps never form a cycle (`after` is always earlier)
// but pairs can (a -> b relays what c -> a carried while b -> c relays what a -> b carried, when
// chains of different pieces start at different replicas): flows on a cycle follow in index order.
std::vector<int> LeadersFirst(const std::vector<Flow>& flows) {
  std::vector<int> indegree(flows.size(), 0), order;
  order.reserve(flows.size());
  for (const Flow& f : flows)
    for (auto [g, k] : f.followers) ++indegree[g];
  for (size_t f = 0; f < flows.size(); ++f)
    if (indegree[f] == 0) order.push_back(static_cast<int>(f));
  for (size_t i = 0; i < order.size(); ++i)
    for (auto [g, k] : flows[order[i]].followers)
      if (--indegree[g] == 0) order.push_back(g);
  if (order.size() < flows.size()) {
    std::vector<char> placed(flows.size(), 0);
    for (int f : order) placed[f] = 1;
    for (size_t f = 0; f < flows.size(); ++f)
      if (!placed[f]) order.push_back(static_cast<int>(f));
  }
  return order;
}

}  // namespace

Result<FlowSet> BuildFlows(const Plan& plan, const Graph& graph, const EndpointMap& endpoints,
                           const SimOptions& options) {
  FlowSet set;
  std::vector<int> step_flow(plan.steps.size(), -1);
  std::unordered_map<uint64_t, int> pair_flow;  // (from side, from rank, to rank) -> flow
  std::unordered_map<uint64_t, int> dep_index;  // (flow, leader) -> index in deps
  for (const PlanStep& step : plan.steps) {
    if (step.id >= plan.steps.size() || plan.steps[step.id].id != step.id)
      return InvalidArgument("plan step " + std::to_string(step.id) + " is out of order");
    int f = -1;
    if (options.granularity == Granularity::kPair) {
      const uint64_t key = (static_cast<uint64_t>(step.from.side == PlanSide::kDestination) << 63) |
                           (static_cast<uint64_t>(static_cast<uint32_t>(step.from.rank)) << 32) |
                           static_cast<uint32_t>(step.to_rank);
      auto [it, inserted] = pair_flow.emplace(key, static_cast<int>(set.flows.size()));
      f = it->second;
      if (inserted) set.flows.emplace_back();
    } else {
      f = static_cast<int>(set.flows.size());
      set.flows.emplace_back();
    }
    step_flow[step.id] = f;
    Flow& flow = set.flows[f];
    if (flow.steps++ == 0) {
      WP_ASSIGN_OR_RETURN(flow.from_node, NodeOf(endpoints, graph, step.from));
      WP_ASSIGN_OR_RETURN(flow.to_node, NodeOf(endpoints, graph, {PlanSide::kDestination, step.to_rank}));
      flow.dst_rank = step.to_rank;
    }
    const double bytes = static_cast<double>(step.bytes);
    flow.bytes += bytes;
    if (step.after < 0) {
      flow.own_bytes += bytes;
      continue;
    }
    if (step.after >= static_cast<int64_t>(step.id))
      return InvalidArgument("plan step " + std::to_string(step.id) + " comes after a later step");
    const int leader = step_flow[step.after];
    const uint64_t key = (static_cast<uint64_t>(f) << 32) | static_cast<uint32_t>(leader);
    auto [it, inserted] = dep_index.emplace(key, static_cast<int>(flow.deps.size()));
    if (inserted) {
      flow.deps.push_back({leader, 0, 0, false});
      set.flows[leader].followers.push_back({f, it->second});
    }
    Dependency& dep = set.flows[f].deps[it->second];
    dep.bytes += bytes;
  }
  // A relay forwards chunk k once it has chunk k: its leader is one chunk ahead.
  const double chunk = static_cast<double>(std::max<uint64_t>(plan.options.chunk_bytes, 1));
  for (Flow& flow : set.flows)
    for (Dependency& dep : flow.deps) dep.lag_bytes = std::min(chunk, dep.bytes);

  // Routes: one per distinct (from, to) node pair; a copy within one node uses its copy engine.
  std::vector<std::pair<int, int>> pairs;
  std::map<std::pair<int, int>, size_t> pair_route;
  for (const Flow& flow : set.flows)
    if (flow.from_node != flow.to_node &&
        pair_route.emplace(std::pair{flow.from_node, flow.to_node}, pairs.size()).second)
      pairs.push_back({flow.from_node, flow.to_node});
  topology::Router router(graph, options.routing);
  WP_ASSIGN_OR_RETURN(std::vector<topology::Path> routes, router.RouteAll(pairs));
  set.graph_links = graph.links().size();
  for (const topology::Link& link : graph.links()) set.capacity.push_back(link.bytes_per_s());
  std::unordered_map<int, int> local_engine;
  set.paths.resize(set.flows.size());
  for (size_t f = 0; f < set.flows.size(); ++f) {
    Flow& flow = set.flows[f];
    if (flow.from_node == flow.to_node) {
      auto [it, inserted] = local_engine.emplace(flow.from_node, static_cast<int>(set.capacity.size()));
      if (inserted) {
        set.capacity.push_back(options.local_copy_bytes_per_s);
        set.local_node.push_back(flow.from_node);
      }
      set.paths[f] = {it->second};
      continue;
    }
    const topology::Path& route = routes[pair_route.at({flow.from_node, flow.to_node})];
    set.paths[f] = route.links;
    flow.latency_s = route.latency_us * 1e-6;
  }
  set.order = LeadersFirst(set.flows);
  return set;
}

}  // namespace weightport::sim
