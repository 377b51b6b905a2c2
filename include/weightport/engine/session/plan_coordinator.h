// Running one Plan across processes: M source ranks and N destination ranks, each a PlanRank in its
// own process, under one PlanCoordinator, over the authenticated control plane
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
//             otherwise; destinations -> Committed(v) after their swap.
//   rollback  a source -> Rollback(v) for a version committed before; coordinator -> destinations
//             Rollback(v); each restores the copy of v it kept and answers ChunksVerified or
//             UpdateFailed; then Commit(v) / Abort(v) to every rank and Committed(v), as for v.
//   rekey     with rotate_keys, once v is decided: coordinator -> every rank Rekey(v); each moves
//             to a fresh transport and answers PlanJoin (new address and key); coordinator ->
//             every rank still in the session PlanPeers (the new table), before the next version.
//   rejoin    (PlanCoordinatorOptions::rejoin) a rank that was lost -> PlanJoin again; at the next
//             version boundary coordinator -> it PeerLost(rank) for each rank still lost, then
//             PlanPeers; -> every other destination PlanPeers (the table with its new entry).
//   end       coordinator -> every rank Bye.
// A rank whose control connection is lost fails the version in flight, named; or, with a quorum
// (PlanCoordinatorOptions::quorum), a lost or failing destination is dropped from the version,
// the others are told PeerLost(rank) for a lost one (the ranks it relayed to fetch from the
// sources, PlanRank::PeerLost), and the version commits to the rest while at least `quorum` verify.
// A source lost after it announced the version whose shards live replicas hold is told to the
// destinations as PeerLost too, and they read its steps from the replicas
// (PlanCoordinatorOptions::replicas).
//
// A rank's end is PlanControl (plan_control.h); a destination follows the versions with
// FollowAsDestination (plan_destination.h), a source hears the verdicts on its own with
// SourceFollower (plan_source.h).
//
// Thread-safety: PlanCoordinator from one thread (it runs reader threads of its own inside).
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
#include "weightport/engine/rank/source_replicas.h"

namespace weightport {

struct PlanCoordinatorOptions {
  uint64_t plan_digest = 0;
  std::vector<Endpoint> ranks;  // every rank of the plan
  // Per rank, the peers its part of the plan names (RankPlan::peers): each rank's peer table lists
  // only those, so no table grows with the session. Empty: every rank gets every rank's entry.
  std::map<Endpoint, std::vector<Endpoint>> peers_of;
  std::chrono::milliseconds join_timeout{30'000};
  std::chrono::milliseconds update_timeout{60'000};  // PlanReady from every source to the last verified
  // 0: every destination must verify each version (all or nothing). N > 0: a destination that is
  // lost or fails a version is dropped from it (a lost one for good) and the version commits when
  // every other destination verified and at least N did.
  size_t quorum = 0;
  std::function<void(std::string)> log;
  // Called on the coordinator's thread once UpdateBegin(v) went to the destinations (not for a
  // rollback): for progress, and for fault drills that strike mid-version. Must return soon.
  std::function<void(uint64_t version)> on_begin;
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
  // Shards several sources hold with the same slice (SourceReplicaGroups of the plan): once every
  // source announced a version, the digests they sent with it (PlanReady) are compared, and a
  // version whose replicas differ is aborted, naming the tensors and the ranks, before any
  // destination reads a byte of it. Empty: not compared.
  //
  // They also let a version outlive a source: one lost after it announced the version is told to
  // the destinations (PeerLost), which read its steps from its replicas (PlanRank::PeerLost), and
  // the version goes on when each of its `source_shards` shards has a replica held by a source
  // that announced it and is not lost; the destinations' verdicts decide. A source lost before it
  // announced, or without such replicas, fails the version, named; so does any lost source for
  // every later version.
  std::vector<SourceReplicaGroup> replicas;
  std::map<Endpoint, size_t> source_shards;  // per source, how many shards it holds
  // Ranks may come back. Once every rank joined, the coordinator goes on accepting: a PlanJoin
  // (same plan digest, a new address and key) for a rank of the plan whose connection was lost (a
  // destination dropped under the quorum, a source its replicas stood in for, a restarted process)
  // is let in at the next version boundary (NextRequest). The rank hears the ranks it must route
  // around (PeerLost), then its peer table; every other rank gets the table with its new entry; it
  // takes part from the next version on: a destination receives that version in full, through its
  // relays where the plan has them, a source publishes it. A source is let in only once every other
  // live source announced a version newer than the last one run, so that they hold still while it
  // refills its shards from them (PlanRank::Refill). A version waits (up to update_timeout) for a
  // lost source to come back, since every version needs every source. A join for a rank
  // whose connection is still up waits (up to join_timeout) for that connection to be lost, then is
  // refused by name.
  bool rejoin = false;
  // With rejoin and a quorum: destinations of the plan that join later (replicas added as the
  // service scales out; the plan reserved their places). WaitForJoins does not wait for them; each
  // other destination hears them as lost (PeerLost) before its table, so it reads around them, and
  // versions run without them. One that joins is let in at a version boundary like a rank that came
  // back (reported in `joined`, not `rejoined`) and receives that version whole from the ranks that
  // hold it: its relays where the plan has them.
  std::vector<Endpoint> late;
  // With rejoin, for ranks that learn their part of the plan from the coordinator (plan sessions,
  // plan_rendezvous.h): a connection whose first message is not a PlanJoin (a LayoutOffer) is given
  // to this, and what it returns (PlanAssign's payload, the rank's part) is sent back, or Refused
  // with its error; then the connection is closed and the rank joins on a new one.
  std::function<Result<Bytes>(const ControlMessage& first, const std::string& peer)> rejoin_offer;
};

struct PlanRankReport {
  Endpoint endpoint;
  bool ok = false;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  uint64_t retries = 0;
  double seconds = 0;  // the rank's own receive time
  std::string error;
};

struct PlanVersionReport {
  uint64_t version = 0;
  bool committed = false;
  std::string reason;  // why it was aborted
  uint64_t bytes = 0;  // over every destination
  double seconds = 0;  // UpdateBegin sent -> last destination verified
  std::vector<PlanRankReport> destinations;
  // Quorum policy: the destinations left out of this version, with why ("dst rank 2: control
  // connection lost: ..."); they keep their old version (a lost one is gone).
  std::vector<std::string> dropped;
  // Sources lost after they announced this version, whose replicas stood in for them.
  std::vector<Endpoint> replaced_sources;
  // rotate_keys: how long the move of every rank to a fresh transport after this version took
  // (from the Rekey sent to the new table sent).
  double rekey_seconds = 0;
  // The verdict came from the record (an earlier coordinator decided it), not from this run.
  bool from_record = false;
  // A rollback to `version` (RunRollback), not a new version.
  bool rollback = false;
  // PlanCoordinatorOptions::rejoin: the ranks let back in before this version.
  std::vector<Endpoint> rejoined;
  // PlanCoordinatorOptions::late: the ranks that joined for the first time before this version.
  std::vector<Endpoint> joined;
};

// What the sources asked for next (PlanCoordinator::NextRequest): a version they announced, or a
// rollback to a version committed before.
struct CoordinatorRequest {
  uint64_t version = 0;
  bool rollback = false;
};

class PlanCoordinator {
 public:
  PlanCoordinator(std::unique_ptr<ControlListener> listener, PlanCoordinatorOptions options);
  ~PlanCoordinator();
  PlanCoordinator(const PlanCoordinator&) = delete;
  PlanCoordinator& operator=(const PlanCoordinator&) = delete;

  const std::string& address() const;
  // Accepts until every rank joined, then sends them the peer table.
  Status WaitForJoins();
  // Waits until some source announced (PlanReady) a version newer than `after` and returns the
  // newest announced; Timeout when none did within `timeout`. For a coordinator that does not know
  // the versions in advance (the sources choose them).
  // Rollback requests that come meanwhile are logged and dropped: use NextRequest to serve them.
  Result<uint64_t> NextReadyVersion(uint64_t after, std::chrono::milliseconds timeout);
  // The same, or a rollback a source asked for (RollbackMsg) since; rollbacks first, in order.
  Result<CoordinatorRequest> NextRequest(uint64_t after, std::chrono::milliseconds timeout);
  // Runs one version; the report says whether it was committed. Errors only for a broken
  // coordinator (not for a failed update, which is aborted and reported).
  Result<PlanVersionReport> RunVersion(uint64_t version);
  // Rolls every destination still in the session back to `version`: each restores it from what it
  // kept (PlanRank::Restore) and reports; Commit(version) to every rank when all did, Abort with
  // the first failure (a destination that does not keep it, or is lost meanwhile) otherwise, so
  // the old version stays live everywhere. All or nothing whatever the quorum; the sources take no
  // part. Not recorded in the store (PlanCoordinatorOptions::decide). With rotate_keys, a rekey
  // round follows, as after a version.
  Result<PlanVersionReport> RunRollback(uint64_t version);
  // PlanCoordinatorOptions::rejoin: waits until each of `ranks` joined (again, or late) and was let in
  // since the last version began (what RunVersion and NextRequest do with the joins that came
  // meanwhile), serving the other ranks' messages while it waits; Timeout naming the ranks still
  // out otherwise. For a caller that restarted a rank and wants it in the next version.
  Status AwaitRejoins(const std::vector<Endpoint>& ranks, std::chrono::milliseconds timeout);
  // Bye to every rank; closes the connections.
  void Finish();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Every rank of a plan, sources first: the ranks a PlanCoordinator waits for.
std::vector<Endpoint> PlanRanks(const Plan& plan);

// "src-3", "dst-0": a rank's name on the control plane.
std::string RankControlName(Endpoint endpoint);

}  // namespace weightport
