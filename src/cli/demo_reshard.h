// `weightport demo --scenario reshard`: a trainer-like group (FSDP flat shards over 4 source ranks)
// feeds inference-like replicas (2 replicas x TP 2 = 4 destination ranks) through a plan, every rank
// its own process (`weightport reshard`), the coordinator in this one.
#pragma once

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "demo_children.h"
#include "pubsub_common.h"

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

}  // namespace weightport::cli
