// One rank's end of a plan session's control plane (the protocol: plan_coordinator.h): joins the
// coordinator, hears its instructions, reports; and the move to a fresh transport that a Rekey asks
// of a rank.
//
// Thread-safety: PlanControl from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "weightport/control/auth.h"
#include "weightport/control/channel.h"
#include "weightport/core/status.h"
#include "weightport/engine/common/transport_factory.h"
#include "weightport/engine/rank/plan_rank.h"
#include "weightport/transport/progress_loop.h"

namespace weightport {

// One rank's end of the control plane.
class PlanControl {
 public:
  // Connects to the coordinator at host:port, joins with `rank`'s plan digest, address and key,
  // waits for the peer table and connects `rank` to its peers.
  static Result<std::unique_ptr<PlanControl>> Join(const std::string& coordinator, const Secret& secret,
                                                   PlanRank& rank, std::chrono::milliseconds timeout);
  ~PlanControl();
  // Shuts the control connection down from any thread: a Next waiting on it returns at once with
  // an error. For closing a rank whose follower thread waits in Next.
  void Interrupt();

  struct Event {
    // kRekey: move to a fresh transport (PlanRank::Rekey), then SendKeys; kPeers: the new peer
    // table that follows, to Connect to; kRollback: restore the kept `version` (PlanRank::Restore)
    // and report it like a received one.
    enum Kind { kBegin, kCommit, kAbort, kBye, kPeerLost, kRekey, kPeers, kRollback } kind = kBye;
    uint64_t version = 0;
    std::string reason;                  // for kAbort
    Endpoint peer;                       // for kPeerLost
    std::map<Endpoint, PlanPeer> peers;  // for kPeers
  };
  // The next instruction from the coordinator; Timeout when none came within `timeout`.
  Result<Event> Next(std::chrono::milliseconds timeout);

  // A source published `version`; with the digests of its replicated shards (PlanRank::replica_digests).
  Status Ready(uint64_t version, std::vector<std::pair<uint32_t, uint64_t>> replica_digests = {});
  // A source asks the coordinator to roll every destination back to `version` (RollbackMsg).
  Status RequestRollback(uint64_t version);
  Status Verified(const ReceiveStats& stats);
  Status Failed(uint64_t version, const std::string& why);
  Status Committed(uint64_t version);
  // After a Rekey: the rank's new transport address and key (peer_info).
  Status SendKeys(const PlanRank& rank);
  // The peer table the rank joined with (a source's holds every rank's entry: what PlanRank::Refill
  // reads from).
  const std::map<Endpoint, PlanPeer>& joined_peers() const { return joined_peers_; }

 private:
  PlanControl(std::unique_ptr<ControlChannel> channel, std::map<Endpoint, PlanPeer> peers)
      : channel_(std::move(channel)), joined_peers_(std::move(peers)) {}
  std::unique_ptr<ControlChannel> channel_;
  std::map<Endpoint, PlanPeer> joined_peers_;
};

// The coordinator's Rekey, on the rank's side: moves `rank` (created with rotate_keys) to a fresh
// transport from `make_transport` (PlanRank::Rekey), then stops the old transport's loop, held in
// `loop`, which then holds the new one. The keys peers hold for the rank stop working there. The
// caller then sends the new keys (PlanControl::SendKeys).
Status MoveToFreshTransport(PlanRank& rank, std::unique_ptr<ProgressLoop>& loop,
                            const TransportFactory& make_transport);

}  // namespace weightport
