// Pieces the built-in scenarios share. Internal to the simulator.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightport/core/placement.h"
#include "weightport/sim/scenarios.h"
#include "weightport/topology/preset_params.h"

namespace weightport::sim {

// endpoints[from, from + count).
std::vector<int> Range(const std::vector<int>& endpoints, int from, int count);
// Plans src -> dst with the planner's view of s.graph (PlannerTopology) and s.endpoints; records
// the plan and its planning time in s.
Status Finish(Scenario& s, const Placement& src, const Placement& dst, uint64_t chunk_bytes,
              int relay_fanout);

// The testbed scenario (scenario_testbed.cc).
nlohmann::json TestbedDefaults();
Status BuildTestbed(Scenario& s, const topology::internal::PresetParams& p);

}  // namespace weightport::sim
