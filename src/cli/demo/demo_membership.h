// `weightport demo --scenario membership`: ranks that fail and come back while versions flow. Data-
// parallel trainer replicas (2 replicas x TP 2 source ranks) feed 3 inference replicas down a relay
// chain, every rank its own process (`weightport reshard`), the coordinator in this one:
//   version 2   a replica is killed once the version began; the others commit it (quorum 2) and
//               its downstream reads around it;
//   after 2     it starts again and joins the running session (PlanCoordinatorOptions::rejoin);
//               version 3 reaches it in full through its relay, from its peers;
//   version 3   a source is killed just after the version began; its data-parallel peer holds the
//               same bytes and the destinations read its steps from there;
//   after 3     a replacement source joins in its place, refills its shards from its data-parallel
//               peer (PlanRank::Refill) and publishes version 4;
//   rollback    every replica goes back from version 4 to version 3 (kept copies, all or nothing).
// Every committed version is checked byte for byte at every replica where it goes live.
#pragma once

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/pubsub/pubsub_common.h"
#include "demo_children.h"

namespace weightport::cli {

struct MembershipDemoOptions {
  ModelSource source;
  std::string transport = "shm";
  bool json = false;
};

// Runs the scenario in `dir`; children it starts are left in `children` for the caller to stop on
// failure. Errors when a version is aborted, a replica finds a byte that differs, or the replicas
// do not all hold version 3 after the rollback.
Result<nlohmann::ordered_json> MembershipDemo(const MembershipDemoOptions& o,
                                              const std::filesystem::path& dir, std::vector<Child>& children);

}  // namespace weightport::cli
