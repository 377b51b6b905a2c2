// PlanCoordinator: one version, or one rollback, from the first message to the verdict, and
// the rekey round after it (the protocol: plan_coordinator.h).
#include <string>

#include "engine/session/session_timing.h"
#include "engine/session/wire_side.h"
#include "plan_coordinator_impl.h"

namespace weightport {

using plan_coordinator_internal::milliseconds;

Result<PlanVersionReport> PlanCoordinator::RunRollback(uint64_t version) {
  PlanVersionReport report = impl_->Run(version, true);
  if (!impl_->record_error.ok()) return impl_->record_error;
  if (impl_->options.rotate_keys) impl_->Rekey(version, report);
  return report;
}

Result<PlanVersionReport> PlanCoordinator::RunVersion(uint64_t version) {
  PlanVersionReport report = impl_->Run(version, false);
  if (!impl_->record_error.ok()) return impl_->record_error;
  if (impl_->options.rotate_keys) impl_->Rekey(version, report);
  return report;
}

void PlanCoordinator::Impl::Rekey(uint64_t version, PlanVersionReport& report) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + options.update_timeout;
  SendAll(MessageType::kRekey, RekeyMsg{version}.Encode(), Impl::Audience::kEveryone);
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
        Log("plan coordinator: " + ep.ToString() + " sent no new keys within " +
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
    const bool same = join.ok() && join->side == WireSide(e->from.side) &&
                      static_cast<int>(join->rank) == e->from.rank &&
                      join->plan_digest == options.plan_digest;
    if (!same) {
      Log("plan coordinator: " + e->from.ToString() +
          " answered the rekey with keys not its own; it leaves the session");
      Lose(e->from);
      channels.at(e->from)->Close();
      continue;
    }
    keys[e->from] = std::move(*join);
  }
  for (auto& [ep, join] : keys) joins[ep] = std::move(join);
  SendPeerTables(joins);
  report.rekey_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

PlanVersionReport PlanCoordinator::Impl::Run(uint64_t version, bool rollback) {
  Impl& m = *this;
  // A rollback's verdict is not recorded: its versions were decided already, and a rollback whose
  // coordinator fails before its verdict is made live nowhere.
  if (m.options.recorded && !rollback) {
    auto on_record = m.AskStore(version, [&] { return m.options.recorded(version); });
    if (!on_record.ok()) {
      m.record_error =
          on_record.status().WithContext("reading the record of version " + std::to_string(version));
      return {};
    }
    if (on_record->has_value()) return m.SendRecorded(version, **on_record);
  }
  // A new version is a boundary: ranks that came back take part from it (not in a rollback, for
  // which they kept nothing).
  if (m.options.rejoin && !rollback) {
    m.AdmitRejoins();
    // Every version needs every source: one that was lost is waited for (its replacement starting),
    // up to update_timeout; the version fails naming it if it does not come back.
    std::vector<Endpoint> gone;
    for (const Endpoint& ep : m.lost)
      if (ep.side == PlanSide::kSource) gone.push_back(ep);
    if (!gone.empty()) {
      m.Log("plan coordinator: version " + std::to_string(version) + " waits for " + gone.front().ToString() +
            (gone.size() > 1 ? " and " + std::to_string(gone.size() - 1) + " more source(s)" : "") +
            " to come back");
      Status back = m.AwaitRejoins(gone, Clock::now() + m.options.update_timeout);
      if (!back.ok()) m.Log("plan coordinator: version " + std::to_string(version) + ": " + back.message());
    }
  }
  PlanVersionReport report;
  report.version = version;
  report.rollback = rollback;
  report.rejoined.swap(m.rejoined);
  report.joined.swap(m.joined);
  if (!rollback) m.last_run = std::max(m.last_run, version);
  const auto deadline = Clock::now() + m.options.update_timeout;
  // A rollback is all or nothing among the destinations still in the session.
  const size_t quorum = rollback ? 0 : m.options.quorum;
  std::set<Endpoint> done;
  std::set<Endpoint> left_out;  // destinations dropped from this version (quorum): lost or failed
  size_t sources = 0, destinations = 0;
  for (const auto& [ep, ch] : m.channels)
    if (!rollback || !m.lost.count(ep)) (ep.side == PlanSide::kSource ? sources : destinations)++;
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
    m.Log("plan coordinator: version " + std::to_string(version) + ": dropped " + why);
    if (destinations - left_out.size() < quorum)
      fail(why + "; " + std::to_string(destinations - left_out.size()) +
           " destination(s) left, the quorum is " + std::to_string(quorum));
  };
  // A lost source fails the version unless replicas stand in for it (announced before it was lost).
  auto lose_source = [&](const Endpoint& ep, const std::string& why) {
    if (std::string no = m.Irreplaceable(ep, version); !no.empty()) return fail(why + " (" + no + ")");
    report.replaced_sources.push_back(ep);
    m.Log("plan coordinator: version " + std::to_string(version) + ": " + why +
          "; its replicas stand in for it");
  };
  for (const Endpoint& ep : m.lost) {
    if (rollback) break;  // the sources take no part; lost destinations are out of the session
    if (ep.side == PlanSide::kSource)
      lose_source(ep, ep.ToString() + " is lost");
    else
      drop(ep, ep.ToString() + " is lost");
  }
  while (failure.empty() && done.size() + left_out.size() < destinations) {
    if (!begun && (rollback || m.ReadyFor(version) == sources)) {
      begun = true;
      begin = Clock::now();
      if (rollback) {
        m.Log("plan coordinator: rolling back to version " + std::to_string(version));
        m.SendAll(MessageType::kRollback, RollbackMsg{version}.Encode(), Impl::Audience::kDestinations);
      } else if (std::string diverged = m.DivergedReplicas(version); !diverged.empty()) {
        fail("the sources' replicas of version " + std::to_string(version) + " differ: " + diverged);
        break;
      } else {
        m.SendAll(MessageType::kUpdateBegin, UpdateBeginMsg{version, 0, 0}.Encode(),
                  Impl::Audience::kDestinations);
        if (m.options.on_begin) m.options.on_begin(version);
      }
      if (destinations == 0) break;
    }
    // Bounded waits: a coordinator told to stop (or abandoned) leaves the version with no verdict.
    auto e = m.Next(std::min(deadline, Clock::now() + session_timing::kEventPoll));
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
      if (e->from.side == PlanSide::kSource && rollback)
        continue;  // it takes no part in a rollback; the next version fails without it
      if (e->from.side == PlanSide::kSource)
        lose_source(e->from, why);
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
  auto recorded = rollback ? Result<bool>(failure.empty()) : m.Record(version, failure.empty(), failure);
  if (!recorded.ok()) {
    m.record_error = recorded.status();
    m.Log("plan coordinator: " + recorded.status().message() + "; no verdict sent");
    return report;
  }
  if (*recorded && !failure.empty()) {
    report.reason.clear();
    return m.SendRecorded(version, true);
  }
  if (!*recorded && failure.empty()) failure = "aborted by an earlier coordinator";
  if (!failure.empty()) {
    report.reason = failure;
    m.Log("plan coordinator: version " + std::to_string(version) + " aborted: " + failure);
    m.SendAll(MessageType::kAbort, AbortMsg{version, failure}.Encode(), Impl::Audience::kEveryone);
    return report;
  }
  // The dropped ones keep their old version; the others swap.
  const Bytes abort = AbortMsg{version, "dropped from version " + std::to_string(version)}.Encode();
  for (const Endpoint& ep : left_out)
    if (!m.lost.count(ep)) m.SendTo(ep, MessageType::kAbort, abort);
  m.SendAll(MessageType::kCommit, CommitMsg{version}.Encode(), Impl::Audience::kEveryone, left_out);
  report.committed = true;
  m.WaitForSwaps(std::move(done));
  return report;
}

}  // namespace weightport
