// Built-in scenarios: a topology, two layouts, the plan between them and where every rank runs,
// for the questions weightport is asked at datacenter scale.
//
//   kimi-k2-update   a Kimi-K2-like 1T-parameter MoE from 256 trainer GPUs (pipeline 8 x expert
//                    parallel 32) to 128 inference GPUs (8 replicas x expert parallel 16) on
//                    dgx-h100; bytes travel as FP8 (the sender quantises, as the published system
//                    does). Published anchor: 1.3 s.
//   dense-50b-sync   a 50B dense model (bf16) from one tensor-parallel group to every GPU of a
//                    1,024-GPU cluster (replicas of the same TP layout), on any preset
//   node-replacement after a node fails, its replacement receives that node's shards from the
//                    data-parallel replicas on the other nodes
//   fanout-16k       one GPU's model (16 GB in 64 buckets) to all 16,384 GPUs of a dgx-h100 fabric
//
// Every size is a parameter (a JSON object of overrides; unknown keys are errors), so the same
// scenarios run small in tests.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"
#include "weightport/plan/plan.h"
#include "weightport/sim/simulator.h"
#include "weightport/topology/graph.h"

namespace weightport::sim {

struct ScenarioInfo {
  std::string name;
  std::string summary;
  nlohmann::json defaults;
};

struct Scenario {
  std::string name;
  std::string description;  // the layouts and sizes, in words
  topology::Graph graph;
  Plan plan;
  EndpointMap endpoints;
  nlohmann::json params;  // the defaults with the overrides applied
  double plan_s = 0;      // wall time of MakePlan
  // The per-message cost to charge (SimOptions::per_message_s): the testbed's `per_message_us`
  // parameter; 0 (bytes only) unless given.
  double per_message_s = 0;
  double anchor_s = 0;  // a published figure for the same job; 0: none
  std::string anchor;   // what the figure is and where it is from
};

std::vector<ScenarioInfo> Scenarios();
Result<Scenario> BuildScenario(std::string_view name,
                               const nlohmann::json& params = nlohmann::json::object());

}  // namespace weightport::sim
