// PlanCoordinator's state, shared by its files: plan_coordinator.cc (joins, the requests of
// the sources), plan_version.cc (running a version or a rollback, and the rekey after it),
// plan_rejoin.cc (ranks let in once the session runs) and plan_coordinator_impl.cc (the
// helpers they share: the record, the swaps, peer tables, the ranks' events).
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/session/wire_side.h"
#include "weightport/control/event_queue.h"
#include "weightport/control/plan_messages.h"
#include "weightport/control/version_messages.h"
#include "weightport/core/thread_annotations.h"
#include "weightport/engine/session/plan_coordinator.h"

namespace weightport {
namespace plan_coordinator_internal {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Event {
  Endpoint from;
  Result<ControlMessage> message;
  const ControlChannel* via = nullptr;  // the connection it came on
};
}  // namespace plan_coordinator_internal

struct PlanCoordinator::Impl {
  using Clock = plan_coordinator_internal::Clock;
  using Event = plan_coordinator_internal::Event;
  using milliseconds = std::chrono::milliseconds;

  std::unique_ptr<ControlListener> listener;
  PlanCoordinatorOptions options;
  std::map<Endpoint, std::unique_ptr<ControlChannel>> channels;
  std::vector<std::thread> readers;
  std::atomic<bool> stopping{false};
  EventQueue<Event> events;
  std::set<Endpoint> lost;  // ranks whose connection failed
  // The last version each source said it published: a source may announce v + 1 while the
  // coordinator still collects Committed(v).
  std::map<Endpoint, uint64_t> ready;
  // Rollbacks the sources asked for (RollbackMsg), in the order they came.
  std::deque<uint64_t> rollbacks;
  // Each source's replica digests and the version they came with (its last PlanReady).
  std::map<Endpoint, std::pair<uint64_t, std::map<uint32_t, uint64_t>>> digests;
  // Every rank's newest join (its address and keys): what peer tables are made of.
  std::map<Endpoint, PlanJoinMsg> joins;

  // options.rejoin (plan_rejoin.cc): the acceptor thread takes the joins that come once the
  // session runs; the coordinator's thread lets them in at a version boundary (AdmitRejoins).
  struct PendingJoin {
    Endpoint endpoint;
    std::unique_ptr<ControlChannel> channel;
    PlanJoinMsg join;
    Clock::time_point since;
  };
  std::thread acceptor;
  Mutex pending_mu;
  std::vector<PendingJoin> pending GUARDED_BY(pending_mu);
  std::vector<std::string> pending_log GUARDED_BY(pending_mu);  // the acceptor's lines, logged later
  std::vector<std::unique_ptr<ControlChannel>> retired;         // lost ranks' channels, replaced on rejoin
  std::vector<Endpoint> rejoined;                               // let in since the last version began
  std::set<Endpoint> absent;     // options.late that have not joined yet: the others read around them
  std::vector<Endpoint> joined;  // late ones let in since the last version began
  uint64_t last_run = 0;         // the newest version run (its verdict sent, or none to send)
  // A source comes back only while every other live source announced a version newer than the last
  // one run: they then hold still (they wait for its verdict), so what it refills from them is one
  // version, whole (PlanRank::Refill).
  bool SourcesHoldStill(const Endpoint& back) const;
  // Tells a destination joining now the ranks it must read around: those lost (where their loss is
  // survivable: a quorum, a source's replicas) and the late ones not here yet.
  Status SendPeersGone(ControlChannel& channel, const Endpoint& to) const;
  void AcceptRejoins();
  void AdmitRejoins();
  // Lets rejoins in until each of `ranks` is among `rejoined`, serving the others' messages; Timeout
  // naming those still out.
  Status AwaitRejoins(const std::vector<Endpoint>& ranks, Clock::time_point deadline);

  // Empty when the sources' replicas of `version` agree (options.replicas); else which differ.
  std::string DivergedReplicas(uint64_t version) const;

  // One version, decided (RunVersion); then, with rotate_keys, every rank's move to a fresh
  // transport and the new peer table to the ranks still in the session.
  PlanVersionReport Run(uint64_t version, bool rollback);
  void Rekey(uint64_t version, PlanVersionReport& report);
  // Set when the record could not be written: the version has no verdict and RunVersion fails.
  Status record_error;

  // Calls the store through `call` until it answers, backing off up to options.record_timeout or
  // until the coordinator is told to stop; the last error otherwise.
  template <typename Call>
  auto AskStore(uint64_t version, Call call) -> decltype(call()) {
    const auto deadline = Clock::now() + options.record_timeout;
    auto answer = call();
    for (int attempt = 0; !answer.ok() && Clock::now() < deadline; ++attempt) {
      if (attempt == 0)
        Log("plan coordinator: the record of version " + std::to_string(version) + ": " +
            answer.status().message());
      if (options.should_stop && options.should_stop()) break;
      std::this_thread::sleep_for(milliseconds(std::min(1000, 50 << std::min(attempt, 4))));
      answer = call();
    }
    return answer;
  }

  // The outcome to send for `version`: `commit` once recorded (options.decide), or the one already
  // on record.
  Result<bool> Record(uint64_t version, bool commit, const std::string& reason);

  // Waits (bounded) until each of `expect` reported its swap (Committed) or its connection failed,
  // so the next version never overlaps a swap.
  void WaitForSwaps(std::set<Endpoint> expect);

  // Sends a verdict already on record to every rank and, for a commit, waits (bounded) for the
  // destinations' swaps.
  PlanVersionReport SendRecorded(uint64_t version, bool committed);

  // The PlanPeers payload for rank `to` of the joins (first or after a rekey) of the ranks not lost:
  // its peers' (options.peers_of), or everyone's.
  Bytes PeerTable(const Endpoint& to, const std::map<Endpoint, PlanJoinMsg>& joins) const;
  void SendPeerTables(const std::map<Endpoint, PlanJoinMsg>& joins);

  // A source's announcement or rollback request, whatever the coordinator was waiting for.
  void NoteReady(const Endpoint& from, const ControlMessage& msg);
  // Empty when lost source `ep` may be stood in for in `version`: it announced it, and live sources
  // that announced it hold replicas of all its shards (options.replicas); else why not.
  std::string Irreplaceable(const Endpoint& ep, uint64_t version) const;
  size_t ReadyFor(uint64_t version) const;

  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }

  void StartReader(Endpoint ep, ControlChannel* ch);

  // The next event before `deadline`, or nullopt.
  // Events from a rank's earlier connection (it joined again since: options.rejoin) are dropped: a
  // late failure of the old one must not mark the new one lost.
  std::optional<Event> Next(Clock::time_point deadline);

  // Who a message to the session's ranks goes to.
  enum class Audience { kSources, kDestinations, kEveryone };

  void SendAll(MessageType type, const Bytes& payload, Audience to, const std::set<Endpoint>& except = {});
  // Sends to one rank. A failed send is logged, naming the rank, and not returned: the rank's
  // reader thread sees the same broken connection and reports the rank lost, which decides.
  void SendTo(const Endpoint& ep, MessageType type, const Bytes& payload);

  // A rank's control connection failed. Under a quorum the destinations hear of it, so that the
  // ranks it relayed to fetch from the sources instead of waiting for it; and of a source that has
  // replicas, so that they read its steps from those.
  void Lose(const Endpoint& ep);
};

}  // namespace weightport
