// Running one Plan across processes: M source ranks and N destination ranks, each a PlanRank in its
// own process, under one ReshardCoordinator, over the authenticated control plane
// (control/channel.h). Weights move only between the ranks (one-sided Gets); the coordinator moves
// small messages.
//
//   join      each rank -> PlanJoin(side, rank, Plan::Digest, transport address, arena key). A rank
//             outside the plan, a second join of a rank, or a different plan digest is refused by
//             name (Refused, and the error of WaitForJoins if the rank never joins correctly).
//   peers     once every rank joined, coordinator -> every rank PlanPeers (the whole table); each
//             rank connects to the ranks it reads from.
//   version v sources -> PlanReady(v) after Publish(v); coordinator -> destinations UpdateBegin(v);
//             destinations -> ChunksVerified(v, chunks, bytes, time, retries) or UpdateFailed(v, why);
//             coordinator -> every rank Commit(v) when all verified, Abort(v, why naming the rank)
//             otherwise; destinations -> Committed(v) after their flip.
//   rekey     with rotate_keys, once v is decided: coordinator -> every rank Rekey(v); each moves
//             to a fresh transport and answers PlanJoin (new address and key); coordinator ->
//             every rank still in the session PlanPeers (the new table), before the next version.
//   end       coordinator -> every rank Bye.
// A rank whose control connection is lost fails the version in flight, named; or, with a quorum
// (ReshardCoordinatorOptions::quorum), a lost or failing destination is dropped from the version,
// the others are told PeerLost(rank) for a lost one (the ranks it relayed to fetch from the
// sources, PlanRank::PeerLost), and the version commits to the rest while at least `quorum` verify.
//
// A rank's end is ReshardMember (reshard_member.h); a destination follows the versions with
// FollowAsDestination (reshard_destination.h), a source hears the verdicts on its own with
// SourceFollower (reshard_source.h).
//
// Thread-safety: ReshardCoordinator from one thread (it runs reader threads of its own inside).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weightport/control/channel.h"
#include "weightport/core/status.h"
#include "weightport/engine/rank/plan_rank.h"

namespace weightport {

struct ReshardCoordinatorOptions {
  uint64_t plan_digest = 0;
  std::vector<Endpoint> ranks;  // every rank of the plan
  // Per rank, the peers its part of the plan names (RankPlan::peers): each rank's peer table lists
  // only those, so no table grows with the session. Empty: every rank gets every rank's entry.
  std::map<Endpoint, std::vector<Endpoint>> peers_of;
  std::chrono::milliseconds join_timeout{30'000};
  std::chrono::milliseconds update_timeout{60'000};  // PlanReady from every source to the last verified
  // 0: every destination must verify each version (all or nothing). N > 0: a destination that is
  // lost or fails a version is dropped from it (a lost one for good) and the version commits when
  // every other destination verified and at least N did. Lost sources always fail the version.
  size_t quorum = 0;
  std::function<void(std::string)> log;
  // Polled while waiting for joins: true ends the wait with Cancelled.
  std::function<bool()> should_stop;
  // Keys per version: once a version is decided, every rank moves to a fresh transport (RekeyMsg)
  // and the ranks still in the session get the new peer table; the keys that version was read with
  // stop working, and a rank lost by then never learns the new ones. The ranks are created with
  // PlanRankOptions::rotate_keys.
  bool rotate_keys = false;
  // A coordinator that can fail (PlanServiceOptions::store). `decide` records the outcome of a
  // version before any rank hears it and returns the outcome recorded, another coordinator's when
  // it decided first: the record is write-once, so two coordinators never send different verdicts
  // for one version. `recorded` gives an outcome already on record: a coordinator that took over
  // sends it instead of running the version again. When the record cannot be written (its store is
  // down past `record_timeout` of retries) the coordinator sends no verdict and RunVersion fails:
  // the ranks keep what they staged until a coordinator that can record takes over. Unset: the
  // decisions live in this process only.
  std::function<Result<bool>(uint64_t version, bool commit, const std::string& reason)> decide;
  std::function<Result<std::optional<bool>>(uint64_t version)> recorded;
  std::chrono::milliseconds record_timeout{15'000};
};

struct ReshardRankReport {
  Endpoint endpoint;
  bool ok = false;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  uint64_t retries = 0;
  double seconds = 0;  // the rank's own receive time
  std::string error;
};

struct ReshardVersionReport {
  uint64_t version = 0;
  bool committed = false;
  std::string reason;  // why it was aborted
  uint64_t bytes = 0;  // over every destination
  double seconds = 0;  // UpdateBegin sent -> last destination verified
  std::vector<ReshardRankReport> destinations;
  // Quorum policy: the destinations left out of this version, with why ("dst rank 2: control
  // connection lost: ..."); they keep their old version (a lost one is gone).
  std::vector<std::string> dropped;
  // rotate_keys: how long the move of every rank to a fresh transport after this version took
  // (from the Rekey sent to the new table sent).
  double rekey_seconds = 0;
  // The verdict came from the record (an earlier coordinator decided it), not from this run.
  bool from_record = false;
};

class ReshardCoordinator {
 public:
  ReshardCoordinator(std::unique_ptr<ControlListener> listener, ReshardCoordinatorOptions options);
  ~ReshardCoordinator();
  ReshardCoordinator(const ReshardCoordinator&) = delete;
  ReshardCoordinator& operator=(const ReshardCoordinator&) = delete;

  const std::string& address() const;
  // Accepts until every rank joined, then sends them the peer table.
  Status WaitForJoins();
  // Waits until some source announced (PlanReady) a version newer than `after` and returns the
  // newest announced; Timeout when none did within `timeout`. For a coordinator that does not know
  // the versions in advance (the sources choose them).
  Result<uint64_t> NextReadyVersion(uint64_t after, std::chrono::milliseconds timeout);
  // Runs one version; the report says whether it was committed. Errors only for a broken
  // coordinator (not for a failed update, which is aborted and reported).
  Result<ReshardVersionReport> RunVersion(uint64_t version);
  // Bye to every rank; closes the connections.
  void Finish();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Every rank of a plan, sources first: the ranks a ReshardCoordinator waits for.
std::vector<Endpoint> PlanRanks(const Plan& plan);

// "src-3", "dst-0": a rank's name on the control plane.
std::string ReshardName(Endpoint endpoint);

}  // namespace weightport
