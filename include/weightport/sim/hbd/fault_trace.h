// Node fault traces: the public JSON event format, synthetic traces for a target fault ratio, and
// random fault sets at a fault ratio. trace_mapping.h places a trace's nodes on a cluster.
//
// JSON: a list of {"node_id": "<id>", "event_time": <days>, "event_type": "fault_start" |
// "fault_end", "fault_type": {...}} (fault_type is kept out of the model). Node ids are numbered in
// order of first appearance.
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

// One fault of one node, down from `start` to `end` (start <= end; equal: a zero-length fault).
struct Fault {
  int node = 0;
  double start = 0, end = 0;
  bool has_start = true;  // false: an end with no start before it, down from day 0
  bool has_end = true;    // false: a start with no end after it, down to the end of the trace
};

struct FaultTrace {
  std::vector<std::string> node_ids;  // by trace node index
  std::vector<Fault> faults;          // by start, then node
  // The faults' starts and ends by time; at equal times starts before ends, so that a zero-length
  // fault goes down and up and a fault ending where the node's next one starts keeps it down.
  // Ends of faults without one (has_end false) are left out.
  std::vector<FaultEvent> events;
  double days = 0;  // the last event's time
};

// Each node's fault_start and fault_end events paired into faults: by time, a start before an end
// at equal times, and each end closing the earliest open fault of its node (overlapping faults of
// one node are two faults; the node is down while either is).
std::vector<Fault> PairFaults(std::vector<FaultEvent> events);
// The replay order of `faults` (FaultTrace::events).
std::vector<FaultEvent> ReplayEvents(const std::vector<Fault>& faults);

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
