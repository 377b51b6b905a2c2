// Node fault traces: the public JSON event format, synthetic traces for a target fault ratio, the
// mapping of trace nodes onto a cluster, and random fault sets at a fault ratio.
//
// JSON: a list of {"node_id": "<id>", "event_time": <days>, "event_type": "fault_start" |
// "fault_end", "fault_type": {...}} (fault_type is kept out of the model). Node ids map to node
// positions of the cluster either in order of first appearance or by a seeded random choice.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/architecture.h"

namespace weightport::sim::hbd {

struct FaultEvent {
  double day = 0;
  int node = 0;  // trace node index (order of first appearance)
  bool start = true;
};

struct FaultTrace {
  std::vector<std::string> node_ids;  // by trace node index
  std::vector<FaultEvent> events;     // by time, ends before starts at equal times
  double days = 0;                    // the last event's time
};

// Strict: unknown event types, missing fields and negative times are errors naming the event.
Result<FaultTrace> ParseFaultTrace(const nlohmann::json& json);
nlohmann::json FaultTraceToJson(const FaultTrace& trace);

struct SyntheticOptions {
  int nodes = 400;
  double fault_ratio = 0.02;     // long-run fraction of nodes down
  double mean_fault_days = 2.0;  // exponential fault durations
  double days = 348;
  uint64_t seed = 1;
};
// The most events a synthetic trace may have (an event costs ~600 bytes as JSON in memory).
inline constexpr double kMaxTraceEvents = 1 << 20;
// The events a synthetic trace is expected to have: per node, one at the start and two per
// up-down cycle of mean_fault_days / fault_ratio days.
double ExpectedTraceEvents(const SyntheticOptions& options);

// Each node alternates up and down with exponential durations (mean down = mean_fault_days, mean
// up chosen so the long-run down fraction is fault_ratio), starting in its stationary state.
// Errors: bad options; ExpectedTraceEvents over kMaxTraceEvents (checked before generating), or
// the draws passing it.
Result<FaultTrace> SyntheticTrace(const SyntheticOptions& options);

// Trace node -> cluster node position: a seeded random choice of distinct positions (seed != 0)
// or positions 0, 1, 2, ... (seed 0). A trace with more nodes than the cluster (bigger nodes)
// wraps around: several trace nodes share a cluster node, which is down while any of them is.
Result<std::vector<int>> MapTraceNodes(const FaultTrace& trace, int cluster_nodes, uint64_t seed);

// Fault sets of round(ratio x nodes) nodes down, chosen uniformly; the same seed gives the same
// sequence of sets.
class FaultDraws {
 public:
  FaultDraws(int nodes, double ratio, uint64_t seed);
  std::vector<char> Next();  // faulty[i]: node i is down
  int down() const { return down_; }

 private:
  std::vector<int> order_;
  int down_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace weightport::sim::hbd
