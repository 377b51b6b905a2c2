#include "sim/flows.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "sim/max_min.h"
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

// Kahn's order over leader -> follower edges (BuildFlows has broken every cycle).
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
  return order;
}

uint64_t PairKey(const PlanStep& step) {
  return (static_cast<uint64_t>(step.from.side == PlanSide::kDestination) << 63) |
         (static_cast<uint64_t>(static_cast<uint32_t>(step.from.rank)) << 32) |
         static_cast<uint32_t>(step.to_rank);
}

// Relay steps must name an earlier step that delivered to their sender.
Status CheckAfter(const Plan& plan, const PlanStep& step) {
  if (step.id >= plan.steps.size() || plan.steps[step.id].id != step.id)
    return InvalidArgument("plan step " + std::to_string(step.id) + " is out of order");
  if (step.after < 0) return Status::Ok();
  const std::string what = "plan step " + std::to_string(step.id);
  if (step.after >= static_cast<int64_t>(step.id)) return InvalidArgument(what + " comes after a later step");
  const PlanStep& feeder = plan.steps[step.after];
  if (step.from.side != PlanSide::kDestination || feeder.to_rank != step.from.rank)
    return InvalidArgument(what + " relays from " + step.from.ToString() + " but its step " +
                           std::to_string(step.after) + " delivers to dst rank " +
                           std::to_string(feeder.to_rank));
  return Status::Ok();
}

// Tarjan's strongly connected components over leader -> follower edges, iteratively; marks the
// flows on a cycle.
std::vector<char> OnCycle(const std::vector<Flow>& flows) {
  const int n = static_cast<int>(flows.size());
  std::vector<int> index(n, -1), low(n, 0), stack;
  std::vector<char> on_stack(n, 0), cyclic(n, 0);
  int next = 0;
  std::vector<std::pair<int, size_t>> frames;  // (flow, next follower to visit)
  for (int root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    frames.push_back({root, 0});
    index[root] = low[root] = next++;
    stack.push_back(root), on_stack[root] = 1;
    while (!frames.empty()) {
      auto& [v, k] = frames.back();
      if (k < flows[v].followers.size()) {
        const int w = flows[v].followers[k++].first;
        if (index[w] < 0) {
          index[w] = low[w] = next++;
          stack.push_back(w), on_stack[w] = 1;
          frames.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      const int done = v;
      frames.pop_back();
      if (!frames.empty()) low[frames.back().first] = std::min(low[frames.back().first], low[done]);
      if (low[done] != index[done]) continue;
      std::vector<int> component;
      int w;
      do {
        w = stack.back();
        stack.pop_back(), on_stack[w] = 0;
        component.push_back(w);
      } while (w != done);
      if (component.size() > 1)
        for (int c : component) cyclic[c] = 1;
    }
  }
  return cyclic;
}

// Groups steps into flows: per pair, except steps whose pair is in `split` (or every step at step
// granularity), which become flows of their own; fills bytes, dependencies and followers, and with
// `count_messages` each flow's contiguous runs.
Result<std::vector<Flow>> Group(const Plan& plan, const Graph& graph, const EndpointMap& endpoints,
                                bool per_pair, const std::unordered_set<uint64_t>& split,
                                bool count_messages) {
  std::vector<Flow> flows;
  std::vector<int> step_flow(plan.steps.size(), -1);
  std::unordered_map<uint64_t, int> pair_flow;  // (from side, from rank, to rank) -> flow
  std::unordered_map<uint64_t, int> dep_index;  // (flow, leader) -> index in deps
  for (const PlanStep& step : plan.steps) {
    WP_RETURN_IF_ERROR(CheckAfter(plan, step));
    int f = static_cast<int>(flows.size());
    const uint64_t key = PairKey(step);
    if (per_pair && !split.count(key)) f = pair_flow.emplace(key, f).first->second;
    if (f == static_cast<int>(flows.size())) flows.emplace_back();
    step_flow[step.id] = f;
    Flow& flow = flows[f];
    if (flow.steps++ == 0) {
      WP_ASSIGN_OR_RETURN(flow.from_node, NodeOf(endpoints, graph, step.from));
      WP_ASSIGN_OR_RETURN(flow.to_node, NodeOf(endpoints, graph, {PlanSide::kDestination, step.to_rank}));
      flow.dst_rank = step.to_rank;
      flow.pair_key = key;
    }
    const double bytes = static_cast<double>(step.bytes);
    flow.bytes += bytes;
    if (count_messages) {
      uint64_t runs = 0;
      Status counted = ForEachStepRun(plan, step, [&](const StepRun&) { ++runs; });
      if (!counted.ok()) return counted.WithContext("plan step " + std::to_string(step.id));
      flow.messages += static_cast<double>(runs);
    }
    if (step.after < 0 || step.bytes == 0) {
      flow.own_bytes += bytes;
      continue;
    }
    const int leader = step_flow[step.after];
    const uint64_t dep_key = (static_cast<uint64_t>(f) << 32) | static_cast<uint32_t>(leader);
    auto [it, inserted] = dep_index.emplace(dep_key, static_cast<int>(flow.deps.size()));
    if (inserted) {
      flow.deps.push_back({leader, 0, 0, false});
      flows[leader].followers.push_back({f, it->second});
    }
    flows[f].deps[it->second].bytes += bytes;
  }
  return flows;
}

}  // namespace

Result<FlowSet> BuildFlows(const Plan& plan, const Graph& graph, const EndpointMap& endpoints,
                           const SimOptions& options) {
  FlowSet set;
  const bool per_pair = options.granularity == Granularity::kPair;
  const bool count_messages = options.per_message_s > 0;
  WP_ASSIGN_OR_RETURN(set.flows, Group(plan, graph, endpoints, per_pair, {}, count_messages));
  if (per_pair) {
    // Pairs can depend on each other in a cycle (a -> b relays what c -> a carried while c -> a
    // relays what b -> c carried, when chains of different pieces start at different replicas); a
    // pair then never gets its last chunk. Those pairs are simulated step by step (steps never
    // form a cycle: `after` is always earlier).
    const std::vector<char> cyclic = OnCycle(set.flows);
    std::unordered_set<uint64_t> split;
    for (size_t f = 0; f < set.flows.size(); ++f)
      if (cyclic[f]) split.insert(set.flows[f].pair_key);
    if (!split.empty()) {
      WP_ASSIGN_OR_RETURN(set.flows, Group(plan, graph, endpoints, true, split, count_messages));
      set.split_pairs = split.size();
    }
  }
  int dst_ranks = 0;
  for (const RankBuffer& b : plan.destinations) dst_ranks = std::max(dst_ranks, b.endpoint.rank + 1);
  for (const Flow& f : set.flows) dst_ranks = std::max(dst_ranks, f.dst_rank + 1);
  set.dst_ranks = dst_ranks;
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
  for (size_t f = 0; f < set.flows.size(); ++f) {
    Flow& flow = set.flows[f];
    flow.payload = flow.bytes;
    if (options.per_message_s <= 0 || flow.messages <= 0 || flow.bytes <= 0) continue;
    // The messages' time as the bytes the path's slowest link carries meanwhile; every part of the
    // flow grows in proportion, so its dependencies keep their meaning.
    double slowest = MaxMinSolver::kNoCap;
    for (int l : set.paths[f]) slowest = std::min(slowest, set.capacity[l]);
    if (!(slowest < MaxMinSolver::kNoCap)) continue;
    const double scale = 1 + flow.messages * options.per_message_s * slowest / flow.bytes;
    flow.bytes *= scale;
    flow.own_bytes *= scale;
    for (Dependency& dep : flow.deps) dep.bytes *= scale;
  }
  // A relay forwards chunk k once it has chunk k: its leader is one chunk (of payload) ahead.
  const double chunk = static_cast<double>(std::max<uint64_t>(plan.options.chunk_bytes, 1));
  for (Flow& flow : set.flows)
    for (Dependency& dep : flow.deps)
      dep.lag_bytes = std::min(flow.payload > 0 ? chunk * flow.bytes / flow.payload : chunk, dep.bytes);
  set.order = LeadersFirst(set.flows);
  return set;
}

}  // namespace weightport::sim
