// `weightport demo --scenario reshard`: a trainer-like group (FSDP flat shards over 4 source ranks)
// feeds inference-like replicas (2 replicas x TP 2 = 4 destination ranks) through a plan, every rank
// its own process (`weightport reshard`), the coordinator in this one.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/pubsub/pubsub_common.h"
#include "cli/reshard/reshard_common.h"
#include "demo_children.h"
#include "weightport/control/channel.h"
#include "weightport/core/placement.h"
#include "weightport/engine/session/plan_coordinator.h"
#include "weightport/plan/plan.h"

namespace weightport::cli {

struct ReshardDemoOptions {
  ModelSource source;
  uint64_t versions = 3;
  std::string transport = "shm";
  int fanout = 1;
  bool json = false;
};

// Runs the scenario in `dir` (placements, secret, logs); children it starts are left in `children`
// for the caller to stop on failure. Errors when a version is aborted or a destination finds a byte
// that differs from the source model.
Result<nlohmann::ordered_json> ReshardDemo(const ReshardDemoOptions& o, const std::filesystem::path& dir,
                                           std::vector<Child>& children);

// What a reshard demo's coordinator starts from: `src` and `dst` written to `dir` (src.json,
// dst.json), the plan made from them with 4 MiB chunks and `fanout`, a secret in `dir`, a loopback
// listener, and coordinator options for every rank of the plan with the demo's long bounds.
struct ReshardDemoSetup {
  ReshardPlanInputs in;
  std::shared_ptr<const Plan> plan;
  std::string secret_path;
  std::unique_ptr<ControlListener> listener;
  PlanCoordinatorOptions options;
};
Result<ReshardDemoSetup> SetUpReshardDemo(const Placement& src, const Placement& dst, int fanout,
                                          const ModelSource& source, const std::filesystem::path& dir);

// The command line of one rank process of a demo (`weightport reshard --role ...`); a destination
// checks every byte it commits (--verify).
std::vector<std::string> ReshardRankArgs(const Endpoint& ep, const ReshardPlanInputs& in,
                                         const std::string& coordinator, const std::string& secret_path,
                                         uint64_t versions, const std::string& transport,
                                         const ModelSource& source);

}  // namespace weightport::cli
