// The processes of `weightport reshard`: a rank (source or destination) and the coordinator.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reshard_common.h"
#include "weightport/engine/rank/relay_headroom.h"
#include "weightport/engine/session/plan_coordinator.h"

namespace weightport::cli {

struct ReshardOptions {
  std::string role;
  int rank = 0;
  ReshardPlanInputs plan;
  uint64_t chunk_kb = 4096;
  std::string coordinator;
  std::string secret_file;
  ModelSource source;
  uint64_t versions = 3;
  double perturb = 1;  // VersionScheme::perturb
  std::string transport = "shm";
  std::string out;
  bool verify = false;
  bool no_delta = false;
  int timeout_s = 120;
  size_t quorum = 0;         // PlanCoordinatorOptions::quorum
  bool rotate_keys = false;  // PlanCoordinatorOptions::rotate_keys, PlanRankOptions::rotate_keys
  // PlanRankOptions::device: "none", "cuda" (the GPU) or "stand-in" (host memory playing one). A
  // source writes each version there, a destination's --verify checks the device copy too.
  std::string device = "none";
  bool device_direct = false;       // PlanRankOptions::device_direct: --verify and --out read the device copy
  bool rejoin = false;              // PlanCoordinatorOptions::rejoin
  std::vector<int> late;            // PlanCoordinatorOptions::late: destination ranks
  uint64_t first_version = 1;       // a replacement source starts here
  bool refill = false;              // ... after refilling its shards from its peers (PlanRank::Refill)
  size_t keep_versions = 0;         // PlanRankOptions::keep_versions
  double max_gbps = 0;              // PlanRankOptions::max_bytes_per_s, in Gbit/s (a destination)
  double delay_backoff = 0;         // PlanRankOptions::delay_factor (a destination)
  std::string priority = "normal";  // background: PlanRankOptions::background (a destination)
  double relay_headroom = kDefaultRelayHeadroom;  // RelayInboundCap (a destination)
  uint64_t crash_at_version = 0;                  // fault drill: SIGKILL itself in this version (0: never)
  uint64_t rollback_to = 0;  // the coordinator rolls every destination back to it at the end
  bool json = false;
};

// A source or destination rank: joins, moves the versions, prints its report.
Status RunReshardRank(const ReshardOptions& o);
// The coordinator on its own.
Status RunReshardCoordinator(const ReshardOptions& o);

// Runs the coordinator's part on an already built plan and listener (shared with the demo), then,
// with `rollback_to`, a rollback of every destination to that version. `say` gets one line per
// version; the JSON array holds one object per version (and one for the rollback).
Result<nlohmann::ordered_json> CoordinateVersions(PlanCoordinator& coordinator, uint64_t versions,
                                                  const std::function<void(const std::string&)>& say,
                                                  bool& all_committed, uint64_t rollback_to = 0);

}  // namespace weightport::cli
