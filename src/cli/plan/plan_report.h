// What `weightport plan` reports about a plan: step counts, bytes per rank and per host, the
// estimate, as text for people and as JSON for scripts.
//
// Thread-safety: plain values and free functions.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightport/plan/plan.h"

namespace weightport::cli {

// Bytes one rank sends and receives under a plan. A destination rank sends when it relays.
struct RankTraffic {
  Endpoint endpoint;
  std::string host;
  uint64_t buffer_bytes = 0;  // the rank's shards, packed
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t steps_sent = 0;
  uint64_t steps_received = 0;
};

struct PlanSummary {
  size_t tensors = 0;
  uint64_t model_bytes = 0;        // one copy of every tensor
  uint64_t bytes = 0;              // moved, all steps
  uint64_t destination_bytes = 0;  // one copy of the destination's shards
  uint64_t steps = 0;
  uint64_t direct_steps = 0;         // from a source rank
  uint64_t relayed_steps = 0;        // from a destination rank that received the piece first
  uint64_t convert_at_sender = 0;    // steps whose source converts (plan.h, TransformKind)
  uint64_t convert_at_receiver = 0;  // steps whose receiver converts
  uint64_t compressed_steps = 0;     // PlanStep::compress
  uint64_t chunks = 0;
  uint32_t max_depth = 0;
  std::vector<RankTraffic> ranks;    // sources, then destinations, ascending rank
  std::optional<double> planning_s;  // none for a plan read from a file
};

// "1.234 s", "45.60 ms", "789 us"
std::string FormatSeconds(double seconds);

// One pass over the plan's steps.
PlanSummary SummarizePlan(const Plan& plan, std::optional<double> planning_s);

// Labels of the two sides (file names; the plan file for a plan read back) for the report.
struct PlanLabels {
  std::string src;
  std::string dst;
};

// {"src": {...}, "dst": {...}, "tensors", "model_bytes", "bytes", "steps": {...}, "estimate": {...},
//  "ranks": [...], "hosts": [...], "planning_s" (null for a plan read back), "digest"}. Byte
// counts are integers.
nlohmann::ordered_json PlanReportJson(const Plan& plan, const PlanSummary& summary, const PlanLabels& labels);

// The same for people: a few lines of totals, then one line per rank and per host.
void PrintPlanReport(std::ostream& out, const Plan& plan, const PlanSummary& summary,
                     const PlanLabels& labels);

}  // namespace weightport::cli
