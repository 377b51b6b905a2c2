// ReshardCoordinator: joins, the peer table, and one version at a time. One reading thread per rank
// feeds an event queue that the caller's thread drains, so a rank that stops sending cannot block
// the others and every wait is bounded.
#include "weightport/engine/session/reshard_coordinator.h"

#include <map>
#include <optional>
#include <set>
#include <thread>

#include "weightport/control/event_queue.h"
#include "weightport/control/handshake.h"
#include "weightport/control/joining_peers.h"
#include "weightport/control/plan_messages.h"
#include "weightport/control/version_messages.h"

namespace weightport {
namespace {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr milliseconds kJoinMessageTimeout(5000);  // from a rank's handshake to its PlanJoin

struct Event {
  Endpoint from;
  Result<ControlMessage> message;
};
}  // namespace

struct ReshardCoordinator::Impl {
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

  // One version, decided (RunVersion); then, with rotate_keys, every rank's move to a fresh
  // transport and the new peer table to the ranks still in the session.
  ReshardVersionReport Run(uint64_t version);
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
      SendAll(MessageType::kAbort, AbortMsg{version, report.reason}.Encode(), true, true);
      return report;
    }
    SendAll(MessageType::kCommit, CommitMsg{version}.Encode(), true, true);
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

  void NoteReady(const Endpoint& from, const ControlMessage& msg) {
    if (msg.type != MessageType::kPlanReady) return;
    if (auto r = PlanReadyMsg::Decode(msg.payload); r.ok()) ready[from] = std::max(ready[from], r->version);
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
        events.Push(Event{ep, std::move(m)});
        if (end) return;
      }
    });
  }

  // The next event before `deadline`, or nullopt.
  std::optional<Event> Next(Clock::time_point deadline) { return events.Next(deadline); }

  void SendAll(MessageType type, const Bytes& payload, bool sources, bool destinations,
               const std::set<Endpoint>& except = {}) {
    for (auto& [ep, ch] : channels) {
      const bool want = ep.side == PlanSide::kSource ? sources : destinations;
      // A lost rank shows in its reader.
      if (want && !lost.count(ep) && !except.count(ep)) ch->Send(type, payload).IgnoreError();
    }
  }

  // A rank's control connection failed. Under a quorum the destinations hear of it, so that the
  // ranks it relayed to fetch from the sources instead of waiting for it.
  void Lose(const Endpoint& ep) {
    if (!lost.insert(ep).second || options.quorum == 0) return;
    Log("reshard: " + ep.ToString() + " is lost; the others go on without it");
    const PeerLostMsg msg{static_cast<uint8_t>(ep.side == PlanSide::kSource ? 0 : 1),
                          static_cast<uint32_t>(ep.rank)};
    SendAll(MessageType::kPeerLost, msg.Encode(), false, true);
  }
};

std::vector<Endpoint> PlanRanks(const Plan& plan) {
  std::vector<Endpoint> out;
  for (const RankBuffer& b : plan.sources) out.push_back(b.endpoint);
  for (const RankBuffer& b : plan.destinations) out.push_back(b.endpoint);
  return out;
}

std::string ReshardName(Endpoint endpoint) {
  return std::string(endpoint.side == PlanSide::kSource ? "src-" : "dst-") + std::to_string(endpoint.rank);
}

ReshardCoordinator::ReshardCoordinator(std::unique_ptr<ControlListener> listener,
                                       ReshardCoordinatorOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->listener = std::move(listener);
  impl_->options = std::move(options);
}

ReshardCoordinator::~ReshardCoordinator() {
  impl_->stopping = true;
  for (auto& [ep, ch] : impl_->channels) ch->Close();
  for (auto& t : impl_->readers) t.join();
}

const std::string& ReshardCoordinator::address() const { return impl_->listener->address(); }

Status ReshardCoordinator::WaitForJoins() {
  Impl& m = *impl_;
  const std::set<Endpoint> expected(m.options.ranks.begin(), m.options.ranks.end());
  const auto deadline = Clock::now() + m.options.join_timeout;
  std::vector<std::string> refused;
  std::map<Endpoint, PlanJoinMsg> joins;
  // PlanJoins are read side by side: a rank slow to send its own holds up no other.
  JoiningPeers joining(kJoinMessageTimeout);
  while (joins.size() < expected.size()) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      std::string missing;
      for (const Endpoint& ep : expected)
        if (!joins.count(ep)) missing += (missing.empty() ? "" : ", ") + ep.ToString();
      std::string why =
          "ranks did not join within " + std::to_string(m.options.join_timeout.count()) + " ms: " + missing;
      for (const auto& r : refused) why += "; refused: " + r;
      return Timeout(why);
    }
    if (m.options.should_stop && m.options.should_stop()) return Cancelled("stopped while waiting for joins");
    auto ch = m.listener->Accept(std::min(left, joining.empty() ? milliseconds(500) : milliseconds(20)));
    if (ch.ok()) {
      joining.Add(std::move(*ch));
    } else if (ch.status().code() != StatusCode::kTimeout) {
      m.Log("reshard: " + ch.status().ToString());
    }
    for (JoiningPeers::Arrival& a : joining.Take()) {
      if (!a.first.ok()) {
        m.Log("reshard: " + a.channel->peer() + " sent no PlanJoin: " + a.first.status().ToString());
        continue;
      }
      Status bad;
      PlanJoinMsg join;
      if (a.first->type != MessageType::kPlanJoin) {
        bad = InvalidArgument(a.channel->peer() + " sent " + std::string(MessageTypeName(a.first->type)) +
                              ", not PlanJoin");
      } else if (auto j = PlanJoinMsg::Decode(a.first->payload); !j.ok()) {
        bad = j.status();
      } else {
        join = *j;
      }
      const Endpoint ep{join.side == 0 ? PlanSide::kSource : PlanSide::kDestination,
                        static_cast<int>(join.rank)};
      if (bad.ok() && !expected.count(ep))
        bad = InvalidArgument(ep.ToString() + " is not a rank of the plan");
      if (bad.ok() && joins.count(ep)) bad = AlreadyExists(ep.ToString() + " joined twice");
      if (bad.ok() && join.plan_digest != m.options.plan_digest)
        bad = FailedPrecondition(ep.ToString() + " compiled a different plan (digest " +
                                 std::to_string(join.plan_digest) + ", the coordinator's is " +
                                 std::to_string(m.options.plan_digest) + ")");
      if (!bad.ok()) {
        m.Log("reshard: refused " + a.channel->peer() + ": " + bad.message());
        refused.push_back(bad.message());
        a.channel->Send(RefusedMsg{bad.message()}).IgnoreError();
        continue;
      }
      m.Log("reshard: " + ep.ToString() + " joined");
      joins[ep] = std::move(join);
      m.channels[ep] = std::move(a.channel);
    }
  }
  const Bytes everyone = m.options.peers_of.empty() ? m.PeerTable({}, joins) : Bytes{};
  for (auto& [ep, ch] : m.channels) {
    Status s = ch->Send(PlanPeersMsg::kType, m.options.peers_of.empty() ? everyone : m.PeerTable(ep, joins));
    if (!s.ok()) return s.WithContext("sending the peer table to " + ep.ToString());
  }
  for (auto& [ep, ch] : m.channels) m.StartReader(ep, ch.get());
  return Status::Ok();
}

Result<uint64_t> ReshardCoordinator::NextReadyVersion(uint64_t after, milliseconds timeout) {
  Impl& m = *impl_;
  const auto deadline = Clock::now() + timeout;
  auto newest = [&] {
    uint64_t v = 0;
    for (const auto& [ep, r] : m.ready) v = std::max(v, r);
    return v;
  };
  while (newest() <= after) {
    auto e = m.Next(deadline);
    if (!e) return Timeout("no source announced a version after " + std::to_string(after));
    if (!e->message.ok()) {
      m.Lose(e->from);
      continue;
    }
    m.NoteReady(e->from, *e->message);
  }
  return newest();
}

Result<ReshardVersionReport> ReshardCoordinator::RunVersion(uint64_t version) {
  ReshardVersionReport report = impl_->Run(version);
  if (!impl_->record_error.ok()) return impl_->record_error;
  if (impl_->options.rotate_keys) impl_->Rekey(version, report);
  return report;
}

void ReshardCoordinator::Impl::Rekey(uint64_t version, ReshardVersionReport& report) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + options.update_timeout;
  SendAll(MessageType::kRekey, RekeyMsg{version}.Encode(), true, true);
  std::map<Endpoint, PlanJoinMsg> keys;
  auto waiting = [&] {
    std::vector<Endpoint> out;
    for (const auto& [ep, ch] : channels)
      if (!lost.count(ep) && !keys.count(ep)) out.push_back(ep);
    return out;
  };
  while (!waiting().empty()) {
    auto e = Next(deadline);
    if (!e) {
      // Not given the new table: such a rank is out of the session, and told so by its closed channel.
      for (const Endpoint& ep : waiting()) {
        Log("reshard: " + ep.ToString() + " sent no new keys within " +
            std::to_string(options.update_timeout.count()) + " ms after version " + std::to_string(version) +
            "; it leaves the session");
        Lose(ep);
        channels.at(ep)->Close();
      }
      break;
    }
    if (!e->message.ok()) {
      Lose(e->from);
      keys.erase(e->from);
      continue;
    }
    NoteReady(e->from, *e->message);
    if (e->message->type != MessageType::kPlanJoin) continue;
    auto join = PlanJoinMsg::Decode(e->message->payload);
    const bool same = join.ok() && join->side == (e->from.side == PlanSide::kSource ? 0 : 1) &&
                      static_cast<int>(join->rank) == e->from.rank &&
                      join->plan_digest == options.plan_digest;
    if (!same) {
      Log("reshard: " + e->from.ToString() +
          " answered the rekey with keys not its own; it leaves the session");
      Lose(e->from);
      channels.at(e->from)->Close();
      continue;
    }
    keys[e->from] = std::move(*join);
  }
  SendPeerTables(keys);
  report.rekey_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

ReshardVersionReport ReshardCoordinator::Impl::Run(uint64_t version) {
  Impl& m = *this;
  if (m.options.recorded) {
    auto on_record = m.AskStore(version, [&] { return m.options.recorded(version); });
    if (!on_record.ok()) {
      m.record_error =
          on_record.status().WithContext("reading the record of version " + std::to_string(version));
      return {};
    }
    if (on_record->has_value()) return m.SendRecorded(version, **on_record);
  }
  ReshardVersionReport report;
  report.version = version;
  const auto deadline = Clock::now() + m.options.update_timeout;
  const size_t quorum = m.options.quorum;
  std::set<Endpoint> done;
  std::set<Endpoint> left_out;  // destinations dropped from this version (quorum): lost or failed
  size_t sources = 0, destinations = 0;
  for (const auto& [ep, ch] : m.channels) (ep.side == PlanSide::kSource ? sources : destinations)++;
  std::string failure;
  Clock::time_point begin{};
  bool begun = false;
  auto fail = [&](const std::string& why) {
    if (failure.empty()) failure = why;
  };
  // A destination leaves the version: all or nothing fails it; a quorum goes on while enough remain.
  auto drop = [&](const Endpoint& ep, const std::string& why) {
    if (quorum == 0) return fail(why);
    if (!left_out.insert(ep).second) return;
    report.dropped.push_back(why);
    m.Log("reshard: version " + std::to_string(version) + ": dropped " + why);
    if (destinations - left_out.size() < quorum)
      fail(why + "; " + std::to_string(destinations - left_out.size()) +
           " destination(s) left, the quorum is " + std::to_string(quorum));
  };
  for (const Endpoint& ep : m.lost) {
    if (ep.side == PlanSide::kSource)
      fail(ep.ToString() + " is lost");
    else
      drop(ep, ep.ToString() + " is lost");
  }
  while (failure.empty() && done.size() + left_out.size() < destinations) {
    if (!begun && m.ReadyFor(version) == sources) {
      begun = true;
      begin = Clock::now();
      m.SendAll(MessageType::kUpdateBegin, UpdateBeginMsg{version, 0, 0}.Encode(), false, true);
      if (destinations == 0) break;
    }
    // Bounded waits: a coordinator told to stop (or abandoned) leaves the version with no verdict.
    auto e = m.Next(std::min(deadline, Clock::now() + milliseconds(100)));
    if (!e && m.options.should_stop && m.options.should_stop()) {
      m.record_error = Cancelled("the coordinator stopped during version " + std::to_string(version));
      return report;
    }
    if (!e && Clock::now() < deadline) continue;
    if (!e) {
      fail("version " + std::to_string(version) + " not done within " +
           std::to_string(m.options.update_timeout.count()) + " ms (" + std::to_string(m.ReadyFor(version)) +
           " of " + std::to_string(sources) + " sources ready, " + std::to_string(done.size()) + " of " +
           std::to_string(destinations) + " destinations verified)");
      break;
    }
    const std::string who = e->from.ToString();
    if (!e->message.ok()) {
      m.Lose(e->from);
      const std::string why = who + ": control connection lost: " + e->message.status().message();
      if (e->from.side == PlanSide::kSource)
        fail(why);
      else if (!done.count(e->from))
        drop(e->from, why);
      continue;
    }
    const ControlMessage& msg = *e->message;
    if (msg.type == MessageType::kPlanReady) {
      m.NoteReady(e->from, msg);
    } else if (msg.type == MessageType::kChunksVerified) {
      auto v = ChunksVerifiedMsg::Decode(msg.payload);
      if (!v.ok() || v->version != version || left_out.count(e->from)) continue;
      done.insert(e->from);
      report.destinations.push_back(
          {e->from, true, v->count, v->bytes, v->retries, v->elapsed_ns * 1e-9, ""});
      report.bytes += v->bytes;
      report.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    } else if (msg.type == MessageType::kUpdateFailed) {
      auto f = UpdateFailedMsg::Decode(msg.payload);
      if (!f.ok() || f->version != version) continue;
      report.destinations.push_back({e->from, false, 0, 0, 0, 0, f->reason});
      drop(e->from, who + ": " + f->reason);
    }
  }
  // The outcome is recorded before any rank hears it; a record that says otherwise wins.
  auto recorded = m.Record(version, failure.empty(), failure);
  if (!recorded.ok()) {
    m.record_error = recorded.status();
    m.Log("reshard: " + recorded.status().message() + "; no verdict sent");
    return report;
  }
  if (*recorded && !failure.empty()) {
    report.reason.clear();
    return m.SendRecorded(version, true);
  }
  if (!*recorded && failure.empty()) failure = "aborted by an earlier coordinator";
  if (!failure.empty()) {
    report.reason = failure;
    m.Log("reshard: version " + std::to_string(version) + " aborted: " + failure);
    m.SendAll(MessageType::kAbort, AbortMsg{version, failure}.Encode(), true, true);
    return report;
  }
  // The dropped ones keep their old version; the others flip.
  const Bytes abort = AbortMsg{version, "dropped from version " + std::to_string(version)}.Encode();
  for (const Endpoint& ep : left_out)
    if (!m.lost.count(ep)) m.channels.at(ep)->Send(MessageType::kAbort, abort).IgnoreError();
  m.SendAll(MessageType::kCommit, CommitMsg{version}.Encode(), true, true, left_out);
  report.committed = true;
  m.WaitForFlips(std::move(done));
  return report;
}

void ReshardCoordinator::Finish() { impl_->SendAll(MessageType::kBye, {}, true, true); }

}  // namespace weightport
