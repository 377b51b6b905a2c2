// ReshardCoordinator's state, shared by its two files: reshard_coordinator.cc (joins, the requests
// of the sources) and reshard_version.cc (running a version or a rollback, and the rekey after it).
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
#include "weightport/engine/session/reshard_coordinator.h"

namespace weightport {
namespace reshard_internal {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Event {
  Endpoint from;
  Result<ControlMessage> message;
  const ControlChannel* via = nullptr;  // the connection it came on
};
}  // namespace reshard_internal

struct ReshardCoordinator::Impl {
  using Clock = reshard_internal::Clock;
  using Event = reshard_internal::Event;
  using milliseconds = std::chrono::milliseconds;

  std::unique_ptr<ControlListener> listener;
  ReshardCoordinatorOptions options;
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

  // options.rejoin (reshard_rejoin.cc): the acceptor thread takes the joins that come once the
  // session runs; the coordinator's thread lets them in at a version boundary (AdmitRejoins).
  struct PendingJoin {
    Endpoint endpoint;
    std::unique_ptr<ControlChannel> channel;
    PlanJoinMsg join;
    Clock::time_point since;
  };
  std::thread acceptor;
  std::mutex pending_mu;
  std::vector<PendingJoin> pending;      // guarded by pending_mu
  std::vector<std::string> pending_log;  // guarded by pending_mu: the acceptor's lines, logged later
  std::vector<std::unique_ptr<ControlChannel>> retired;  // lost ranks' channels, replaced on rejoin
  std::vector<Endpoint> rejoined;                        // let in since the last version began
  std::set<Endpoint> absent;     // options.late that have not joined yet: the others read around them
  std::vector<Endpoint> joined;  // late ones let in since the last version began
  uint64_t last_run = 0;         // the newest version run (its verdict sent, or none to send)
  // A source comes back only while every other live source announced a version newer than the last
  // one run: they then hold still (they wait for its verdict), so what it refills from them is one
  // version, whole (PlanRank::Refill).
  bool SourcesHoldStill(const Endpoint& back) const {
    for (const auto& [ep, ch] : channels) {
      if (ep.side != PlanSide::kSource || ep == back || lost.count(ep)) continue;
      auto r = ready.find(ep);
      if (r == ready.end() || r->second <= last_run) return false;
    }
    return true;
  }
  // Tells a destination joining now the ranks it must read around: those lost (where their loss is
  // survivable: a quorum, a source's replicas) and the late ones not here yet.
  Status SendPeersGone(ControlChannel& channel, const Endpoint& to) const;
  void AcceptRejoins();
  void AdmitRejoins();
  // Lets rejoins in until each of `ranks` is among `rejoined`, serving the others' messages; Timeout
  // naming those still out.
  Status AwaitRejoins(const std::vector<Endpoint>& ranks, Clock::time_point deadline);

  // Empty when the sources' replicas of `version` agree (options.replicas); else which differ.
  std::string DivergedReplicas(uint64_t version) const {
    if (options.replicas.empty()) return "";
    return DescribeDivergence(options.replicas, [&](Endpoint ep, uint32_t shard) -> std::optional<uint64_t> {
      auto d = digests.find(ep);
      if (d == digests.end() || d->second.first != version) return std::nullopt;
      auto it = d->second.second.find(shard);
      return it == d->second.second.end() ? std::nullopt : std::optional<uint64_t>(it->second);
    });
  }

  // One version, decided (RunVersion); then, with rotate_keys, every rank's move to a fresh
  // transport and the new peer table to the ranks still in the session.
  ReshardVersionReport Run(uint64_t version, bool rollback);
  void Rekey(uint64_t version, ReshardVersionReport& report);
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
        Log("reshard: the record of version " + std::to_string(version) + ": " + answer.status().message());
      if (options.should_stop && options.should_stop()) break;
      std::this_thread::sleep_for(milliseconds(std::min(1000, 50 << std::min(attempt, 4))));
      answer = call();
    }
    return answer;
  }

  // The outcome to send for `version`: `commit` once recorded (options.decide), or the one already
  // on record.
  Result<bool> Record(uint64_t version, bool commit, const std::string& reason) {
    if (!options.decide) return commit;
    auto d = AskStore(version, [&] { return options.decide(version, commit, reason); });
    if (!d.ok()) return d.status().WithContext("recording the outcome of version " + std::to_string(version));
    if (*d != commit)
      Log("reshard: version " + std::to_string(version) + " was already recorded as " +
          (*d ? "committed" : "aborted") + "; sending that");
    return d;
  }

  // Waits (bounded) until each of `expect` reported its flip (Committed) or its connection failed,
  // so the next version never overlaps a flip.
  void WaitForFlips(std::set<Endpoint> expect) {
    // A rank already lost sends no Committed (its loss may have been read before the verdict).
    for (const Endpoint& ep : lost) expect.erase(ep);
    const auto deadline = Clock::now() + options.update_timeout;
    while (!expect.empty()) {
      auto e = Next(deadline);
      if (!e) break;
      if (!e->message.ok()) {
        Lose(e->from);
        expect.erase(e->from);  // it will not report its flip; do not wait for it
        continue;
      }
      if (e->message->type == MessageType::kCommitted) expect.erase(e->from);
      NoteReady(e->from, *e->message);
    }
    for (const Endpoint& ep : expect)
      Log("reshard: no Committed from " + ep.ToString() + " within " +
          std::to_string(options.update_timeout.count()) + " ms of the commit");
  }

  // Sends a verdict already on record to every rank and, for a commit, waits (bounded) for the
  // destinations' flips.
  ReshardVersionReport SendRecorded(uint64_t version, bool committed) {
    ReshardVersionReport report;
    report.version = version;
    report.committed = committed;
    report.from_record = true;
    Log("reshard: version " + std::to_string(version) + " is on record as " +
        (committed ? "committed" : "aborted") + "; telling every rank");
    if (!committed) {
      report.reason = "aborted by an earlier coordinator";
      SendAll(MessageType::kAbort, AbortMsg{version, report.reason}.Encode(), Audience::kEveryone);
      return report;
    }
    SendAll(MessageType::kCommit, CommitMsg{version}.Encode(), Audience::kEveryone);
    std::set<Endpoint> destinations;
    for (const auto& [ep, ch] : channels)
      if (ep.side == PlanSide::kDestination && !lost.count(ep)) destinations.insert(ep);
    WaitForFlips(std::move(destinations));
    return report;
  }

  // The PlanPeers payload for rank `to` of the joins (first or after a rekey) of the ranks not lost:
  // its peers' (options.peers_of), or everyone's.
  Bytes PeerTable(const Endpoint& to, const std::map<Endpoint, PlanJoinMsg>& joins) const {
    PlanPeersMsg table;
    auto add = [&](const Endpoint& ep) {
      auto j = joins.find(ep);
      if (j == joins.end() || lost.count(ep)) return;
      table.peers.push_back({j->second.side, j->second.rank, j->second.transport_address,
                             j->second.remote_key, j->second.device_key, j->second.device_memory});
    };
    if (auto only = options.peers_of.find(to); only != options.peers_of.end()) {
      for (const Endpoint& ep : only->second) add(ep);
    } else {
      for (const auto& [ep, j] : joins) add(ep);
    }
    return table.Encode();
  }
  void SendPeerTables(const std::map<Endpoint, PlanJoinMsg>& joins) {
    const Bytes everyone = options.peers_of.empty() ? PeerTable({}, joins) : Bytes{};
    for (auto& [ep, ch] : channels)
      if (!lost.count(ep))
        ch->Send(MessageType::kPlanPeers, options.peers_of.empty() ? everyone : PeerTable(ep, joins))
            .IgnoreError();
  }

  // A source's announcement or rollback request, whatever the coordinator was waiting for.
  void NoteReady(const Endpoint& from, const ControlMessage& msg) {
    if (msg.type == MessageType::kRollback && from.side == PlanSide::kSource) {
      if (auto r = RollbackMsg::Decode(msg.payload); r.ok() && r->version > 0)
        rollbacks.push_back(r->version);
      return;
    }
    if (msg.type != MessageType::kPlanReady) return;
    auto r = PlanReadyMsg::Decode(msg.payload);
    if (!r.ok()) return;
    ready[from] = std::max(ready[from], r->version);
    auto& d = digests[from];
    d.first = r->version;
    d.second = std::map<uint32_t, uint64_t>(r->replica_digests.begin(), r->replica_digests.end());
  }
  // Empty when lost source `ep` may be stood in for in `version`: it announced it, and live sources
  // that announced it hold replicas of all its shards (options.replicas); else why not.
  std::string Irreplaceable(const Endpoint& ep, uint64_t version) const {
    auto announced = [&](const Endpoint& s) {
      auto r = ready.find(s);
      return r != ready.end() && r->second >= version;
    };
    if (!announced(ep)) return "before it announced version " + std::to_string(version);
    auto shards = options.source_shards.find(ep);
    if (options.replicas.empty() || shards == options.source_shards.end()) return "it has no replicas";
    return MissingReplicas(options.replicas, ep, shards->second,
                           [&](Endpoint s) { return !lost.count(s) && announced(s); });
  }
  size_t ReadyFor(uint64_t version) const {
    size_t n = 0;
    for (const auto& [ep, v] : ready) n += v >= version;
    return n;
  }

  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }

  void StartReader(Endpoint ep, ControlChannel* ch) {
    readers.emplace_back([this, ep, ch] {
      while (!stopping.load()) {
        auto m = ch->Receive(milliseconds(200));
        if (!m.ok() && m.status().code() == StatusCode::kTimeout) continue;
        const bool end = !m.ok();
        events.Push(Event{ep, std::move(m), ch});
        if (end) return;
      }
    });
  }

  // The next event before `deadline`, or nullopt.
  // Events from a rank's earlier connection (it joined again since: options.rejoin) are dropped: a
  // late failure of the old one must not mark the new one lost.
  std::optional<Event> Next(Clock::time_point deadline) {
    while (true) {
      auto e = events.Next(deadline);
      if (!e) return e;
      auto ch = channels.find(e->from);
      if (ch == channels.end() || ch->second.get() == e->via) return e;
    }
  }

  // Who a message to the session's ranks goes to.
  enum class Audience { kSources, kDestinations, kEveryone };

  void SendAll(MessageType type, const Bytes& payload, Audience to, const std::set<Endpoint>& except = {}) {
    for (auto& [ep, ch] : channels) {
      const bool want =
          to == Audience::kEveryone || (to == Audience::kSources) == (ep.side == PlanSide::kSource);
      // A lost rank shows in its reader.
      if (want && !lost.count(ep) && !except.count(ep)) ch->Send(type, payload).IgnoreError();
    }
  }

  // A rank's control connection failed. Under a quorum the destinations hear of it, so that the
  // ranks it relayed to fetch from the sources instead of waiting for it; and of a source that has
  // replicas, so that they read its steps from those.
  void Lose(const Endpoint& ep) {
    if (!lost.insert(ep).second) return;
    if (ep.side == PlanSide::kSource ? options.replicas.empty() : options.quorum == 0) return;
    Log("reshard: " + ep.ToString() + " is lost; the others go on without it");
    const PeerLostMsg msg{WireSide(ep.side), static_cast<uint32_t>(ep.rank)};
    SendAll(MessageType::kPeerLost, msg.Encode(), Audience::kDestinations);
  }
};

}  // namespace weightport
