// PlanCoordinator: joins, the peer table, and the sources' requests (the versions themselves run
// in plan_version.cc). One reading thread per rank feeds an event queue that the caller's thread
// drains, so a rank that stops sending cannot block the others and every wait is bounded.
#include "weightport/engine/session/plan_coordinator.h"

#include <map>
#include <set>
#include <thread>

#include "engine/session/session_timing.h"
#include "engine/session/wire_side.h"
#include "plan_coordinator_impl.h"
#include "weightport/control/handshake.h"
#include "weightport/control/joining_peers.h"

namespace weightport {
namespace {
using plan_coordinator_internal::Clock;
using plan_coordinator_internal::milliseconds;
}  // namespace

std::vector<Endpoint> PlanRanks(const Plan& plan) {
  std::vector<Endpoint> out;
  for (const RankBuffer& b : plan.sources) out.push_back(b.endpoint);
  for (const RankBuffer& b : plan.destinations) out.push_back(b.endpoint);
  return out;
}

std::string RankControlName(Endpoint endpoint) {
  return std::string(endpoint.side == PlanSide::kSource ? "src-" : "dst-") + std::to_string(endpoint.rank);
}

PlanCoordinator::PlanCoordinator(std::unique_ptr<ControlListener> listener, PlanCoordinatorOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->listener = std::move(listener);
  impl_->options = std::move(options);
}

PlanCoordinator::~PlanCoordinator() {
  impl_->stopping = true;
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  for (auto& [ep, ch] : impl_->channels) ch->Close();
  for (auto& t : impl_->readers) t.join();
}

const std::string& PlanCoordinator::address() const { return impl_->listener->address(); }

Status PlanCoordinator::WaitForJoins() {
  Impl& m = *impl_;
  const std::set<Endpoint> expected(m.options.ranks.begin(), m.options.ranks.end());
  const std::set<Endpoint> late(m.options.late.begin(), m.options.late.end());
  for (const Endpoint& ep : late) {
    if (!expected.count(ep) || ep.side != PlanSide::kDestination)
      return InvalidArgument("late rank " + ep.ToString() + " is not a destination of the plan");
    if (!m.options.rejoin || m.options.quorum == 0)
      return InvalidArgument("late ranks (" + ep.ToString() +
                             ") need rejoin and a quorum: versions run before they join");
  }
  const auto deadline = Clock::now() + m.options.join_timeout;
  std::vector<std::string> refused;
  std::map<Endpoint, PlanJoinMsg> joins;
  // PlanJoins are read side by side: a rank slow to send its own holds up no other.
  JoiningPeers joining(kJoinMessageTimeout);
  // Every rank but the late ones (which may come now too).
  auto waiting = [&] {
    for (const Endpoint& ep : expected)
      if (!joins.count(ep) && !late.count(ep)) return true;
    return false;
  };
  while (waiting()) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      std::string missing;
      for (const Endpoint& ep : expected)
        if (!joins.count(ep) && !late.count(ep)) missing += (missing.empty() ? "" : ", ") + ep.ToString();
      std::string why =
          "ranks did not join within " + std::to_string(m.options.join_timeout.count()) + " ms: " + missing;
      for (const auto& r : refused) why += "; refused: " + r;
      return Timeout(why);
    }
    if (m.options.should_stop && m.options.should_stop()) return Cancelled("stopped while waiting for joins");
    auto ch = m.listener->Accept(
        std::min(left, joining.empty() ? session_timing::kAcceptIdle : session_timing::kAcceptWhileJoining));
    if (ch.ok()) {
      joining.Add(std::move(*ch));
    } else if (ch.status().code() != StatusCode::kTimeout) {
      m.Log("plan coordinator: " + ch.status().ToString());
    }
    for (JoiningPeers::Arrival& a : joining.Take()) {
      if (!a.first.ok()) {
        m.Log("plan coordinator: " + a.channel->peer() + " sent no PlanJoin: " + a.first.status().ToString());
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
      const Endpoint ep = EndpointFromWire(join.side, join.rank);
      if (bad.ok() && !expected.count(ep))
        bad = InvalidArgument(ep.ToString() + " is not a rank of the plan");
      if (bad.ok() && joins.count(ep)) bad = AlreadyExists(ep.ToString() + " joined twice");
      if (bad.ok() && join.plan_digest != m.options.plan_digest)
        bad = FailedPrecondition(ep.ToString() + " compiled a different plan (digest " +
                                 std::to_string(join.plan_digest) + ", the coordinator's is " +
                                 std::to_string(m.options.plan_digest) + ")");
      if (!bad.ok()) {
        m.Log("plan coordinator: refused " + a.channel->peer() + ": " + bad.message());
        refused.push_back(bad.message());
        a.channel->TurnAway(bad.message());
        continue;
      }
      m.Log("plan coordinator: " + ep.ToString() + " joined");
      joins[ep] = std::move(join);
      m.channels[ep] = std::move(a.channel);
    }
  }
  for (const Endpoint& ep : late)
    if (!joins.count(ep)) m.absent.insert(ep);
  if (!m.absent.empty())
    m.Log("plan coordinator: " + std::to_string(m.absent.size()) +
          " late rank(s) not here yet; the others read around them");
  const Bytes everyone = m.options.peers_of.empty() ? m.PeerTable({}, joins) : Bytes{};
  for (auto& [ep, ch] : m.channels) {
    Status s = m.SendPeersGone(*ch, ep);
    if (s.ok())
      s = ch->Send(PlanPeersMsg::kType, m.options.peers_of.empty() ? everyone : m.PeerTable(ep, joins));
    if (!s.ok()) return s.WithContext("sending the peer table to " + ep.ToString());
  }
  for (auto& [ep, ch] : m.channels) m.StartReader(ep, ch.get());
  m.joins = std::move(joins);
  if (m.options.rejoin) m.acceptor = std::thread([&m] { m.AcceptRejoins(); });
  return Status::Ok();
}

Result<uint64_t> PlanCoordinator::NextReadyVersion(uint64_t after, milliseconds timeout) {
  while (true) {
    WP_ASSIGN_OR_RETURN(CoordinatorRequest next, NextRequest(after, timeout));
    if (!next.rollback) return next.version;
    impl_->Log("plan coordinator: a rollback to version " + std::to_string(next.version) +
               " was asked for; this coordinator runs announced versions only");
  }
}

Result<CoordinatorRequest> PlanCoordinator::NextRequest(uint64_t after, milliseconds timeout) {
  Impl& m = *impl_;
  const auto deadline = Clock::now() + timeout;
  auto newest = [&] {
    uint64_t v = 0;
    for (const auto& [ep, r] : m.ready) v = std::max(v, r);
    return v;
  };
  // The version boundary: ranks that came back are let in here (options.rejoin).
  if (m.options.rejoin) m.AdmitRejoins();
  while (m.rollbacks.empty() && newest() <= after) {
    auto e =
        m.Next(m.options.rejoin ? std::min(deadline, Clock::now() + session_timing::kEventPoll) : deadline);
    if (!e && m.options.rejoin && Clock::now() < deadline) {
      m.AdmitRejoins();
      continue;
    }
    if (!e) return Timeout("no source announced a version after " + std::to_string(after));
    if (!e->message.ok()) {
      m.Lose(e->from);
      continue;
    }
    m.NoteReady(e->from, *e->message);
  }
  if (!m.rollbacks.empty()) {
    const uint64_t v = m.rollbacks.front();
    m.rollbacks.pop_front();
    return CoordinatorRequest{v, true};
  }
  return CoordinatorRequest{newest(), false};
}

void PlanCoordinator::Finish() {
  impl_->SendAll(MessageType::kBye, {}, Impl::Audience::kEveryone);
  MutexLock lock(impl_->pending_mu);
  for (Impl::PendingJoin& p : impl_->pending)
    p.channel->TurnAway("the session ended before " + p.endpoint.ToString() + " could join again");
  impl_->pending.clear();
}

}  // namespace weightport
