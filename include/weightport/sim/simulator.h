// The flow-level simulator: executes a Plan on a topology Graph.
//
// Model (docs/SIMULATOR.md has the derivation and the error measurements):
//   - Flows. At `pair` granularity (the default) every (sender, receiving rank) pair is one flow
//     carrying all its steps' bytes, as the engine keeps one connection and one window per peer.
//     At `step` granularity every step is its own flow (exact dependencies, many more flows).
//   - Sharing. Active flows share links max-min fairly (progressive filling); a flow crosses the
//     links its route gives (routing.h).
//   - Pipelining through relays. A relay step forwards chunk k once chunk k of the step that fed
//     it has arrived, so a relayed flow may send a dependent byte only once its leader is one chunk
//     (min(chunk_bytes, bytes)) plus the leader's path latency ahead of it; once caught up it runs
//     no faster than the leader feeds it. At pair granularity a leader's bytes are assumed to
//     progress in proportion across the steps it carries (the engine fetches ready chunks by
//     index across steps).
//   - Messages. With SimOptions::per_message_s > 0, every contiguous run of a step (one Get in
//     the engine: ForEachStepRun) costs that long on its flow's path, charged as the bytes the
//     path's slowest link would carry in that time; bytes reported and the lower bound stay the
//     plan's own. A reshard that cuts matrices along their last dimension is thousands of small Gets,
//     which cost more than their bytes (docs/SIMULATOR.md has the calibration).
//   - Latency. Each hop adds its link latency once: to the start of every dependent flow and to
//     the completion of every flow.
//   - Time. Event driven: completions, catch-ups and dependencies opening are exact; rates are
//     re-solved at most once per `quantum_s` (0: at every event). Between solves, capacity freed
//     by a finished flow waits for the next solve and a newly runnable flow takes what is left on
//     its path. The error this introduces is measured against quantum 0 in docs/SIMULATOR.md.
//
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"
#include "weightport/plan/plan.h"
#include "weightport/topology/graph.h"
#include "weightport/topology/routing.h"

namespace weightport::sim {

enum class Granularity : uint8_t { kPair, kStep };
const char* GranularityName(Granularity granularity);  // "pair", "step"
Result<Granularity> ParseGranularity(std::string_view name);

struct SimOptions {
  topology::RoutingPolicy routing = topology::RoutingPolicy::kRailOptimised;
  Granularity granularity = Granularity::kPair;
  // < 0: the lower bound / 2000; 0: re-solve at every event.
  double quantum_s = -1;
  // Bandwidth of a copy between two ranks on the same node (no link crossed), bytes/s.
  double local_copy_bytes_per_s = 1e12;
  // The cost of one message (one contiguous run, one Get), in seconds on the flow's path; 0: bytes
  // only (and the runs are not counted).
  double per_message_s = 0;
  int timeline_points = 200;
};

// Where each rank of a plan lives: graph node indices (endpoints), by rank.
struct EndpointMap {
  std::vector<int> src_nodes;
  std::vector<int> dst_nodes;
};
// Sources on the graph's endpoints in order from `src_offset`, destinations from `dst_offset`
// (< 0: right after the sources). Errors when the graph has too few endpoints.
Result<EndpointMap> MapRanksInOrder(const topology::Graph& graph, const Plan& plan, int src_offset = 0,
                                    int dst_offset = -1);

struct DestinationTime {
  int rank = 0;
  int node = 0;
  uint64_t bytes = 0;
  double done_s = 0;
};

struct LinkUse {
  int link = 0;  // index into the graph's links; >= links().size(): a node's local copy engine
  uint64_t bytes = 0;
  double busy_s = 0;       // bytes / capacity
  double utilisation = 0;  // busy_s / makespan
};

struct TimelineSample {
  double t_s = 0;
  double delivered_bytes = 0;  // into destination ranks, cumulative
  int running_flows = 0;
  int destinations_done = 0;
};

struct SimStats {
  size_t steps = 0;
  size_t flows = 0;
  size_t split_pairs = 0;  // pairs on a dependency cycle, simulated step by step
  uint64_t messages = 0;   // contiguous runs charged (SimOptions::per_message_s > 0)
  size_t events = 0;
  size_t solves = 0;
  double quantum_s = 0;
  double wall_s = 0;
};

struct SimResult {
  double makespan_s = 0;
  // max over links of bytes / capacity: no schedule of these flows on these routes is faster.
  double lower_bound_s = 0;
  int bottleneck_link = -1;
  std::vector<DestinationTime> destinations;  // by rank
  std::vector<LinkUse> links;                 // links that carried bytes, busiest first
  std::vector<TimelineSample> timeline;
  SimStats stats;

  // {"makespan_s", "lower_bound_s", "bottleneck", "destinations", "links" (the `max_links`
  // busiest, named), "timeline", "stats"}.
  nlohmann::json ToJson(const topology::Graph& graph, size_t max_links = 20) const;
};

Result<SimResult> Simulate(const Plan& plan, const topology::Graph& graph, const EndpointMap& endpoints,
                           const SimOptions& options = {});

// The timeline as a standalone SVG chart: delivered bytes (and finished destinations) over time,
// with the lower bound marked.
std::string TimelineSvg(const SimResult& result, std::string_view title);

}  // namespace weightport::sim
