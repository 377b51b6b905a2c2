// PlanCoordinator::Impl's helpers that every part of the coordinator uses (plan_coordinator.cc,
// plan_version.cc, plan_rejoin.cc): the record, the swaps, peer tables, the ranks' events
// and what is sent to them.
#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "engine/session/plan_coordinator_impl.h"
#include "engine/session/session_timing.h"

namespace weightport {

bool PlanCoordinator::Impl::SourcesHoldStill(const Endpoint& back) const {
  for (const auto& [ep, ch] : channels) {
    if (ep.side != PlanSide::kSource || ep == back || lost.count(ep)) continue;
    auto r = ready.find(ep);
    if (r == ready.end() || r->second <= last_run) return false;
  }
  return true;
}

std::string PlanCoordinator::Impl::DivergedReplicas(uint64_t version) const {
  if (options.replicas.empty()) return "";
  return DescribeDivergence(options.replicas, [&](Endpoint ep, uint32_t shard) -> std::optional<uint64_t> {
    auto d = digests.find(ep);
    if (d == digests.end() || d->second.first != version) return std::nullopt;
    auto it = d->second.second.find(shard);
    return it == d->second.second.end() ? std::nullopt : std::optional<uint64_t>(it->second);
  });
}

Result<bool> PlanCoordinator::Impl::Record(uint64_t version, bool commit, const std::string& reason) {
  if (!options.decide) return commit;
  auto d = AskStore(version, [&] { return options.decide(version, commit, reason); });
  if (!d.ok()) return d.status().WithContext("recording the outcome of version " + std::to_string(version));
  if (*d != commit)
    Log("plan coordinator: version " + std::to_string(version) + " was already recorded as " +
        (*d ? "committed" : "aborted") + "; sending that");
  return d;
}

void PlanCoordinator::Impl::WaitForSwaps(std::set<Endpoint> expect) {
  // A rank already lost sends no Committed (its loss may have been read before the verdict).
  for (const Endpoint& ep : lost) expect.erase(ep);
  const auto deadline = Clock::now() + options.update_timeout;
  while (!expect.empty()) {
    auto e = Next(deadline);
    if (!e) break;
    if (!e->message.ok()) {
      Lose(e->from);
      expect.erase(e->from);  // it will not report its swap; do not wait for it
      continue;
    }
    if (e->message->type == MessageType::kCommitted) expect.erase(e->from);
    NoteReady(e->from, *e->message);
  }
  for (const Endpoint& ep : expect)
    Log("plan coordinator: no Committed from " + ep.ToString() + " within " +
        std::to_string(options.update_timeout.count()) + " ms of the commit");
}

PlanVersionReport PlanCoordinator::Impl::SendRecorded(uint64_t version, bool committed) {
  PlanVersionReport report;
  report.version = version;
  report.committed = committed;
  report.from_record = true;
  Log("plan coordinator: version " + std::to_string(version) + " is on record as " +
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
  WaitForSwaps(std::move(destinations));
  return report;
}

Bytes PlanCoordinator::Impl::PeerTable(const Endpoint& to,
                                       const std::map<Endpoint, PlanJoinMsg>& joins) const {
  PlanPeersMsg table;
  auto add = [&](const Endpoint& ep) {
    auto j = joins.find(ep);
    if (j == joins.end() || lost.count(ep)) return;
    table.peers.push_back({j->second.side, j->second.rank, j->second.transport_address, j->second.remote_key,
                           j->second.device_key, j->second.device_memory});
  };
  if (auto only = options.peers_of.find(to); only != options.peers_of.end()) {
    for (const Endpoint& ep : only->second) add(ep);
  } else {
    for (const auto& [ep, j] : joins) add(ep);
  }
  return table.Encode();
}

void PlanCoordinator::Impl::SendPeerTables(const std::map<Endpoint, PlanJoinMsg>& joins) {
  const Bytes everyone = options.peers_of.empty() ? PeerTable({}, joins) : Bytes{};
  for (auto& [ep, ch] : channels)
    if (!lost.count(ep))
      ch->Send(MessageType::kPlanPeers, options.peers_of.empty() ? everyone : PeerTable(ep, joins))
          .IgnoreError();
}

void PlanCoordinator::Impl::NoteReady(const Endpoint& from, const ControlMessage& msg) {
  if (msg.type == MessageType::kRollback && from.side == PlanSide::kSource) {
    if (auto r = RollbackMsg::Decode(msg.payload); r.ok() && r->version > 0) rollbacks.push_back(r->version);
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

std::string PlanCoordinator::Impl::Irreplaceable(const Endpoint& ep, uint64_t version) const {
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

size_t PlanCoordinator::Impl::ReadyFor(uint64_t version) const {
  size_t n = 0;
  for (const auto& [ep, v] : ready) n += v >= version;
  return n;
}

void PlanCoordinator::Impl::StartReader(Endpoint ep, ControlChannel* ch) {
  readers.emplace_back([this, ep, ch] {
    while (!stopping.load()) {
      auto m = ch->Receive(session_timing::kMessagePoll);
      if (!m.ok() && m.status().code() == StatusCode::kTimeout) continue;
      const bool end = !m.ok();
      events.Push(Event{ep, std::move(m), ch});
      if (end) return;
    }
  });
}

std::optional<PlanCoordinator::Impl::Event> PlanCoordinator::Impl::Next(Clock::time_point deadline) {
  while (true) {
    auto e = events.Next(deadline);
    if (!e) return e;
    auto ch = channels.find(e->from);
    if (ch == channels.end() || ch->second.get() == e->via) return e;
  }
}

void PlanCoordinator::Impl::SendAll(MessageType type, const Bytes& payload, Audience to,
                                    const std::set<Endpoint>& except) {
  for (auto& [ep, ch] : channels) {
    const bool want =
        to == Audience::kEveryone || (to == Audience::kSources) == (ep.side == PlanSide::kSource);
    if (want && !lost.count(ep) && !except.count(ep)) SendTo(ep, type, payload);
  }
}

void PlanCoordinator::Impl::SendTo(const Endpoint& ep, MessageType type, const Bytes& payload) {
  const Status sent = channels.at(ep)->Send(type, payload);
  if (!sent.ok())
    Log("plan coordinator: could not send " + std::string(MessageTypeName(type)) + " to " + ep.ToString() +
        ": " + sent.message());
}

void PlanCoordinator::Impl::Lose(const Endpoint& ep) {
  if (!lost.insert(ep).second) return;
  if (ep.side == PlanSide::kSource ? options.replicas.empty() : options.quorum == 0) return;
  Log("plan coordinator: " + ep.ToString() + " is lost; the others go on without it");
  const PeerLostMsg msg{WireSide(ep.side), static_cast<uint32_t>(ep.rank)};
  SendAll(MessageType::kPeerLost, msg.Encode(), Audience::kDestinations);
}

}  // namespace weightport
