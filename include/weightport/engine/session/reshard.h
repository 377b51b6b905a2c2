// Running one Plan across processes: M source ranks and N destination ranks, each a PlanRank in its
// own process, under one ReshardCoordinator, over the authenticated control plane
// (control_channel.h). Weights move only between the ranks (one-sided Gets); the coordinator moves
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
// Thread-safety: ReshardCoordinator from one thread (it runs reader threads of its own inside);
// ReshardMember from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weightport/control/channel.h"
#include "weightport/core/status.h"
#include "weightport/engine/common/transport_factory.h"
#include "weightport/engine/rank/plan_rank.h"

namespace weightport {

struct ReshardCoordinatorOptions {
  uint64_t plan_digest = 0;
  std::vector<Endpoint> ranks;  // every rank of the plan
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

// One rank's end of the control plane.
class ReshardMember {
 public:
  // Connects to the coordinator at host:port, joins with `rank`'s plan digest, address and key,
  // waits for the peer table and connects `rank` to its peers.
  static Result<std::unique_ptr<ReshardMember>> Join(const std::string& coordinator, const Secret& secret,
                                                     PlanRank& rank, std::chrono::milliseconds timeout);
  ~ReshardMember();

  struct Event {
    // kRekey: move to a fresh transport (PlanRank::Rekey), then SendKeys; kPeers: the new peer
    // table that follows, to Connect to.
    enum Kind { kBegin, kCommit, kAbort, kBye, kPeerLost, kRekey, kPeers } kind = kBye;
    uint64_t version = 0;
    std::string reason;                  // for kAbort
    Endpoint peer;                       // for kPeerLost
    std::map<Endpoint, PlanPeer> peers;  // for kPeers
  };
  // The next instruction from the coordinator; Timeout when none came within `timeout`.
  Result<Event> Next(std::chrono::milliseconds timeout);

  Status Ready(uint64_t version);  // a source published `version`
  Status Verified(const ReceiveStats& stats);
  Status Failed(uint64_t version, const std::string& why);
  Status Committed(uint64_t version);
  // After a Rekey: the rank's new transport address and key (peer_info).
  Status SendKeys(const PlanRank& rank);

 private:
  explicit ReshardMember(std::unique_ptr<ControlChannel> channel) : channel_(std::move(channel)) {}
  std::unique_ptr<ControlChannel> channel_;
};

// What a destination does around each step of FollowAsDestination; every hook is optional.
struct DestinationHooks {
  // Before receiving `version`; an error is reported as that update's failure instead.
  std::function<Status(uint64_t version)> before_receive;
  // After Receive(version), on the receiving thread.
  std::function<void(uint64_t version, const Result<ReceiveStats>&)> received;
  // After the flip to `version`; an error is returned at the end (the run goes on).
  std::function<Status(uint64_t version)> committed;
  std::function<void(uint64_t version, const std::string& why)> aborted;
  // On the coordinator's Rekey after `version`: moves the rank to a fresh transport
  // (PlanRank::Rekey); the keys are then sent. Without it a Rekey ends the run with an error.
  std::function<Status(uint64_t version)> rekey;
  // With this hook, a wait for an instruction that times out is not an error: the wait goes on
  // until this returns true (then FollowAsDestination returns Cancelled). Without it, it is.
  std::function<bool()> should_stop;
};

// Runs a destination rank until the coordinator says Bye: receives each version it is told to on a
// thread of its own (so that an Abort arriving meanwhile cancels it, and the ranks that relay from
// this one stop waiting), reports, and commits or aborts as told; a PeerLost goes to the rank
// (PlanRank::PeerLost) at once, also while it receives. `timeout` bounds each wait for an
// instruction. Returns the first error of a hook or of the control connection.
Status FollowAsDestination(PlanRank& rank, ReshardMember& member, std::chrono::milliseconds timeout,
                           const DestinationHooks& hooks);

// Every rank of a plan, sources first: the ranks a ReshardCoordinator waits for.
std::vector<Endpoint> PlanRanks(const Plan& plan);

// "src-3", "dst-0": a rank's name on the control plane.
std::string ReshardName(Endpoint endpoint);

// The coordinator's Rekey, on the rank's side: moves `rank` (created with rotate_keys) to a fresh
// transport from `make_transport` (PlanRank::Rekey), then stops the old transport's loop, held in
// `loop`, which then holds the new one. The keys peers hold for the rank stop working there. The
// caller then sends the new keys (ReshardMember::SendKeys).
Status MoveToFreshTransport(PlanRank& rank, std::unique_ptr<ProgressLoop>& loop,
                            const TransportFactory& make_transport);

}  // namespace weightport
