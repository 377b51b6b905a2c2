// `weightport hbd compare --trace`: the trace with its own statistics, its replay per
// architecture over several seeded mappings of its servers onto the cluster, and their reports.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/charts.h"
#include "weightport/sim/hbd/cluster_eval.h"
#include "weightport/sim/hbd/fault_trace.h"
#include "weightport/sim/hbd/trace_stats.h"

namespace weightport::cli {

struct TraceInput {
  std::string path;
  sim::hbd::FaultTrace trace;
  int servers = 0;          // --trace-nodes
  int gpus_per_server = 0;  // --gpus-per-trace-node
  sim::hbd::TraceStats stats;
};

// Reads and checks the trace (errors name the file, or the option at fault).
Result<TraceInput> LoadTrace(const std::string& path, int servers, int gpus_per_server,
                             std::optional<double> sample_days);

nlohmann::ordered_json TraceStatsJson(const TraceInput& input);
void PrintTraceStats(const TraceInput& input, int mappings, uint64_t seed, double sample_days);

struct TraceReplay {
  int mappings = 1;
  uint64_t seed = 1;  // mapping m uses seed + m
  double sample_days = 1.0 / 24;
};

// One architecture's replay of the trace on `cluster_nodes` nodes under each mapping: the means
// over mappings of each figure, and the per-mapping means' spread. `series` gets the first
// mapping's waste over time.
Result<nlohmann::ordered_json> ReplayTrace(const sim::hbd::ArchSpec& arch, int cluster_nodes,
                                           const TraceInput& input, const TraceReplay& replay,
                                           const sim::hbd::EvalOptions& eval, sim::hbd::Series& series);

// One line (two with the greedy re-cut) of the text table for an architecture's "trace" JSON.
void PrintTraceRow(const std::string& arch, const nlohmann::ordered_json& t);

}  // namespace weightport::cli
