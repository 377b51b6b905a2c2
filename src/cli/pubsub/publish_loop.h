// The publishing loop shared by `weightport publish` and `weightport demo`: publish a version, take
// a stand-in training step, publish the next, and report each version as it is decided.
#pragma once

#include <chrono>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"
#include "weightport/engine/pubsub/publisher.h"

namespace weightport::cli {

struct PublishLoopOptions {
  uint64_t versions = 3;
  // Versions first_version .. first_version + versions - 1. Version v's content depends only on v
  // (the seed and the perturbations 2..v), so a restarted publisher republishes the same bytes.
  uint64_t first_version = 1;
  double perturb = 0.01;  // fraction of elements a "training step" changes between versions
  uint64_t seed = 1;
  PublishMode mode = PublishMode::kLive;
  bool quiet = false;  // no per-version lines on stdout
  std::chrono::milliseconds report_timeout{60'000};
  // An aborted version is reported ("verified": false, "reason") and the next one published, instead
  // of ending the loop with its error.
  bool keep_going = false;
  // The coordinator holds the first version (with wait_each, every version: one that was lost and
  // restarted has rejoined) until this many subscribers are connected with their staging memory
  // ready, up to subscriber_timeout;
  // fewer aborts it. A version committed to no subscriber is reported as not verified.
  size_t subscribers = 0;
  bool wait_each = false;
  std::chrono::milliseconds subscriber_timeout{120'000};
};

// Publishes versions 1..versions. Returns one JSON object per version (see docs/ARCHITECTURE.md,
// "weightport demo --json"); fails on the first version that is not committed, naming why.
Result<nlohmann::ordered_json> PublishVersions(WholePublisher& publisher, const PublishLoopOptions& options);

}  // namespace weightport::cli
