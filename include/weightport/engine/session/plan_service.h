// Plan sessions: the engine as a library user (the Python package, an application) drives it.
// Each rank says only what it holds; the plan comes from the rendezvous (plan_rendezvous.h).
//
//   PlanService     the coordinator, on a background thread: collects the layouts, plans once,
//                   accepts the ranks' joins, then runs every version the sources announce
//                   (PlanCoordinator), until Stop. Usually hosted by source rank 0.
//   PlanPublisher   a source rank (plan_publisher.h).
//   PlanSubscriber  a destination rank (plan_subscriber.h).
// The ranks' options and their view of a shard: plan_member.h.
//
// Thread-safety: every public method may be called from any thread; Stop is idempotent.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weightport/control/auth.h"
#include "weightport/control/metrics.h"
#include "weightport/core/status.h"
#include "weightport/engine/session/plan_rendezvous.h"
#include "weightport/plan/plan.h"
#include "weightport/store/etcd_client.h"

namespace weightport {

inline constexpr std::string_view kVersionsMetric = "weightport_coordinator_versions_total";

struct PlanServiceOptions {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;  // 0: any free port (see address())
  RendezvousOptions rendezvous;
  std::chrono::milliseconds join_timeout{60'000};
  std::chrono::milliseconds update_timeout{120'000};
  // PlanCoordinatorOptions::quorum: 0, every destination verifies each version; N > 0, a lost or
  // failing destination is dropped and the others commit while at least N verified.
  size_t quorum = 0;
  // Keys per version (PlanCoordinatorOptions::rotate_keys); the ranks join with
  // PlanRankOptions::rotate_keys.
  bool rotate_keys = false;
  // PlanCoordinatorOptions::rejoin: a rank whose connection was lost (a subscriber closed or
  // restarted, a publisher replaced) may offer the same layout again once the session runs; it is
  // given its part of the plan again and takes part from the next version.
  bool rejoin = false;
  std::function<void(std::string)> log;
  // A coordinator that can fail: "etcd://host:port" (store/etcd_client.h). The service campaigns
  // to be `session`'s coordinator (store/coordinator_election.h) and serves only while it leads:
  // a standby waits, and takes over when the leader's lease (`lease_ttl`) runs out. The ranks find
  // the leader's address in the store (CoordinatorFinder). Each version's outcome is recorded there
  // before any rank hears it (store/fleet_record.h, write-once), so a service that takes over
  // completes or aborts the version in flight as the record says, and never sends a different
  // verdict. Empty: the embedded coordinator, nothing outside this process.
  std::string store;
  std::string session = "default";
  std::chrono::seconds lease_ttl{3};
  // Where the service counts the versions it decided (kVersionsMetric, by outcome) and, with a
  // store, reports the store's health and whether it leads (engine/session/store_health.h); may be
  // null. It must outlive the service. Failed calls to the store are also logged, rate-limited.
  Metrics* metrics = nullptr;
};

// For PlanMemberOptions::find_coordinator: the address of `session`'s coordinator in `store`
// ("etcd://host:port"), asking until there is one or the timeout passes. A rank whose `secret` is
// not the session's (the store's secret check differs) is PermissionDenied at once.
std::function<Result<std::string>(std::chrono::milliseconds)> CoordinatorFinder(std::string store,
                                                                                std::string session,
                                                                                const Secret& secret);

// Who may lead a session: its first coordinator records an HMAC of a fixed text under the
// session's secret (session_keys::SecretCheck); a coordinator or rank whose secret gives another
// is refused, PermissionDenied naming the session, before it campaigns or connects. So a
// coordinator started with the wrong secret can never win the election and end the session for
// every rank. The HMAC reveals nothing of a secret of 16 bytes or more.
std::string SessionSecretCheck(const Secret& secret, std::string_view session);
// Compares `check` with the session's; records it first when the session has none and
// `record_if_absent`. True when they match, false when none is recorded (and not
// `record_if_absent`); PermissionDenied when they differ.
Result<bool> VerifySessionSecret(EtcdClient& store, std::string_view session, std::string_view check,
                                 bool record_if_absent);

// What one version did, as the coordinator saw it.
struct PlanVersionOutcome {
  uint64_t version = 0;
  bool committed = false;
  std::string reason;  // why it was aborted
  uint64_t bytes = 0;
  double seconds = 0;
  double rekey_seconds = 0;           // rotate_keys: the move of every rank to fresh transports after it
  std::vector<std::string> dropped;   // quorum: the destinations left out, with why
  bool rollback = false;              // a rollback to `version` a source asked for, not a new version
  std::vector<std::string> rejoined;  // rejoin: the ranks let back in before this version
};

// What the rendezvous and the joins cost, once the ranks joined.
struct PlanSessionStats {
  bool joined = false;  // every rank joined; the figures below are final
  size_t ranks = 0;
  size_t plan_steps = 0;
  double plan_seconds = 0;        // from the last offer: merging the offers and planning
  double send_seconds = 0;        // cutting, encoding and sending every rank its part
  double join_seconds = 0;        // from the last part sent to every rank joined and given its peers
  uint64_t max_part_bytes = 0;    // the largest part one rank received
  uint64_t total_part_bytes = 0;  // every part
  size_t max_peers = 0;           // the most peer-table entries one rank received
};

class PlanService {
 public:
  // Listens; the rendezvous and the versions run on a background thread.
  static Result<std::unique_ptr<PlanService>> Start(const Secret& secret, PlanServiceOptions options);
  ~PlanService();  // Stop()
  const std::string& address() const;
  // The plan, once the rendezvous made it (null before).
  std::shared_ptr<const Plan> plan() const;
  PlanSessionStats stats() const;
  // Every version run so far, oldest first (a version is listed once every destination reported
  // its commit, a little after the sources heard the verdict).
  std::vector<PlanVersionOutcome> outcomes() const;
  // Waits until `version` is listed at or after index `from` of outcomes() (a rollback to it when
  // `rollback`); Timeout otherwise, or the service's error if it ended.
  Result<PlanVersionOutcome> WaitForOutcome(uint64_t version, std::chrono::milliseconds timeout,
                                            bool rollback = false, size_t from = 0) const;
  // The error that ended the service early (rendezvous or joins failed), OK while it runs.
  Status error() const;
  // Says Bye to every rank and stops. Idempotent.
  void Stop();
  // Stops without a word, as a killed process would: closes its listener and every control
  // connection, sends no verdict or Bye and leaves its lease to run out (a standby then takes
  // over). For failover tests.
  void Abandon();
  // With a store: whether this service leads its session now.
  bool leading() const;

  struct Impl;

 private:
  explicit PlanService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightport
