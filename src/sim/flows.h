// The flows a plan puts on a topology: steps grouped at the chosen granularity, routed, with the
// relay dependencies between them. Internal to the simulator.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/plan/plan.h"
#include "weightport/sim/simulator.h"
#include "weightport/topology/graph.h"

namespace weightport::sim {

// Bytes of a flow that become available as its leader progresses.
struct Dependency {
  int leader = 0;        // flow index
  double bytes = 0;      // of this flow
  double lag_bytes = 0;  // the leader is this far ahead (in this flow's bytes) before they flow
  bool open = false;     // the leader has crossed the lag (and its latency has passed)
  double cross_s = -1;   // when the leader crossed (or is predicted to cross) the lag
};

struct Flow {
  // What the flow carries: its payload plus its messages' cost as bytes (SimOptions::per_message_s),
  // the unit of its rate, progress and dependencies.
  double bytes = 0;
  double payload = 0;    // the plan's bytes: what is reported delivered and bounds the links
  double messages = 0;   // contiguous runs, counted when per_message_s > 0
  double own_bytes = 0;  // available from the start (sent by a source)
  std::vector<Dependency> deps;
  std::vector<std::pair<int, int>> followers;  // (flow, index in its deps)
  int from_node = 0;
  int to_node = 0;
  int dst_rank = 0;
  uint64_t pair_key = 0;  // its (sender, receiving rank) pair
  uint32_t steps = 0;
  double latency_s = 0;
};

struct FlowSet {
  std::vector<Flow> flows;
  std::vector<std::vector<int>> paths;  // per flow: link indices (graph links, then local engines)
  std::vector<double> capacity;         // bytes/s per link index
  std::vector<int> order;               // every leader before its followers
  size_t graph_links = 0;               // indices >= this are local copy engines, one per node
  size_t split_pairs = 0;               // pairs on a dependency cycle, simulated per step
  int dst_ranks = 0;                    // destination ranks of the plan (some may receive nothing)
  std::vector<int> local_node;          // node of each local copy engine
};

Result<FlowSet> BuildFlows(const Plan& plan, const topology::Graph& graph, const EndpointMap& endpoints,
                           const SimOptions& options);

}  // namespace weightport::sim
