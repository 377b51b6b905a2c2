// Routing: which links a flow from one node to another crosses.
//
// Paths minimise the sum of link costs (Dijkstra). Host memory is an endpoint only, never a
// transit node (a copy between two GPUs does not bounce through DRAM); GPUs may forward (a TPU
// torus, NVLink to the GPU on the right rail before the NIC).
//   kShortest       the first shortest path found (lowest link index at every hop): deterministic
//                   and concentrated, for checking by hand;
//   kEcmp           equal-cost multipath: among equal shortest paths, every hop is chosen by a hash
//                   of (source, destination, node), so flows spread over spines as switches do;
//   kRailOptimised  ECMP, and a link into or out of a spine costs half a hop more, so a flow
//                   between different rails crosses the HBD to the GPU on the destination's rail
//                   and stays on that rail's leaf (NCCL's PXN) instead of climbing to a spine.
//
// Thread-safety: a Router is immutable after construction; Route and RouteAll may run
// concurrently.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/topology/graph.h"

namespace weightport::topology {

enum class RoutingPolicy : uint8_t { kShortest, kEcmp, kRailOptimised };
const char* RoutingPolicyName(RoutingPolicy policy);  // "shortest", "ecmp", "rail"
Result<RoutingPolicy> ParseRoutingPolicy(std::string_view name);

struct Path {
  std::vector<int> links;  // in order, from the source
  double latency_us = 0;   // sum over the links
  double cost = 0;
};

class Router {
 public:
  Router(const Graph& graph, RoutingPolicy policy) : graph_(graph), policy_(policy) {}

  // Error when a node index is out of range or no path exists (named by node names). A node to
  // itself is an empty path.
  Result<Path> Route(int from, int to) const;
  // Routes for many pairs with one search per distinct source; the result is in `pairs` order.
  Result<std::vector<Path>> RouteAll(const std::vector<std::pair<int, int>>& pairs) const;

 private:
  double LinkCost(const Link& link) const;
  const Graph& graph_;
  RoutingPolicy policy_;
};

}  // namespace weightport::topology
