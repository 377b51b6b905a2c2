// PlanCoordinator: ranks that come back (PlanCoordinatorOptions::rejoin). A thread of its own
// accepts and checks their joins while versions run; the coordinator's thread lets them in only
// between versions, so no version sees its membership change halfway.
#include <algorithm>
#include <string>
#include <utility>

#include "engine/session/session_timing.h"
#include "engine/session/wire_side.h"
#include "plan_coordinator_impl.h"
#include "weightport/control/handshake.h"
#include "weightport/control/joining_peers.h"
#include "weightport/control/plan_messages.h"

namespace weightport {
namespace {
using plan_coordinator_internal::Clock;
using plan_coordinator_internal::milliseconds;
constexpr milliseconds kAcceptPoll(200);  // how often the acceptor looks at `stopping`
}  // namespace

void PlanCoordinator::Impl::AcceptRejoins() {
  const std::set<Endpoint> plan_ranks(options.ranks.begin(), options.ranks.end());
  auto note = [&](std::string line) {
    MutexLock lock(pending_mu);
    pending_log.push_back(std::move(line));
  };
  while (!stopping.load()) {
    auto ch = listener->Accept(kAcceptPoll);
    if (!ch.ok()) {
      if (ch.status().code() != StatusCode::kTimeout) note("plan coordinator: " + ch.status().ToString());
      continue;
    }
    auto first = (*ch)->Receive(kJoinMessageTimeout);
    if (first.ok() && first->type != MessageType::kPlanJoin && options.rejoin_offer) {
      // A rank asking for its part of the plan before it joins again.
      auto part = options.rejoin_offer(*first, (*ch)->peer());
      if (part.ok()) {
        const Status sent = (*ch)->Send(PlanAssignMsg::kType, *part);
        if (!sent.ok())
          note("plan coordinator: could not send " + (*ch)->peer() + " its part: " + sent.message());
      } else {
        note("plan coordinator: refused an offer: " + part.status().message());
        (*ch)->TurnAway(part.status().message());
      }
      (*ch)->Close();
      continue;
    }
    Status bad;
    PlanJoinMsg join;
    if (!first.ok()) {
      bad = first.status().WithContext((*ch)->peer() + " sent no PlanJoin");
    } else if (first->type != MessageType::kPlanJoin) {
      bad = InvalidArgument((*ch)->peer() + " sent " + std::string(MessageTypeName(first->type)) +
                            ", not PlanJoin");
    } else if (auto j = PlanJoinMsg::Decode(first->payload); !j.ok()) {
      bad = j.status();
    } else {
      join = *j;
    }
    const Endpoint ep = EndpointFromWire(join.side, join.rank);
    if (bad.ok() && !plan_ranks.count(ep))
      bad = InvalidArgument(ep.ToString() + " is not a rank of the plan");
    if (bad.ok() && join.plan_digest != options.plan_digest)
      bad = FailedPrecondition(ep.ToString() + " compiled a different plan (digest " +
                               std::to_string(join.plan_digest) + ", the coordinator's is " +
                               std::to_string(options.plan_digest) + ")");
    if (!bad.ok()) {
      note("plan coordinator: refused a join: " + bad.message());
      if (first.ok()) (*ch)->TurnAway(bad.message());
      continue;
    }
    note("plan coordinator: " + ep.ToString() + " asks to join; it comes in at the next version");
    MutexLock lock(pending_mu);
    pending.push_back(PendingJoin{ep, std::move(*ch), std::move(join), Clock::now()});
  }
}

Status PlanCoordinator::Impl::SendPeersGone(ControlChannel& channel, const Endpoint& to) const {
  if (to.side != PlanSide::kDestination) return Status::Ok();  // the sources read from nobody
  auto send = [&](const Endpoint& gone) {
    const PeerLostMsg msg{WireSide(gone.side), static_cast<uint32_t>(gone.rank)};
    return channel.Send(MessageType::kPeerLost, msg.Encode());
  };
  for (const Endpoint& gone : lost) {
    if (gone == to) continue;
    if (gone.side == PlanSide::kSource ? options.replicas.empty() : options.quorum == 0) continue;
    WP_RETURN_IF_ERROR(send(gone));
  }
  for (const Endpoint& gone : absent)
    if (gone != to) WP_RETURN_IF_ERROR(send(gone));
  return Status::Ok();
}

void PlanCoordinator::Impl::AdmitRejoins() {
  std::vector<PendingJoin> now;
  std::vector<std::string> lines;
  {
    MutexLock lock(pending_mu);
    now.swap(pending);
    lines.swap(pending_log);
  }
  for (const std::string& line : lines) Log(line);
  std::vector<PendingJoin> later;
  for (PendingJoin& p : now) {
    const Endpoint ep = p.endpoint;
    auto old = channels.find(ep);
    if (old != channels.end() && !lost.count(ep)) {
      // Its first connection is up as far as this coordinator knows: a restarted process whose old
      // connection has not failed yet, or a second process with the same rank.
      if (Clock::now() - p.since < options.join_timeout) {
        later.push_back(std::move(p));
        continue;
      }
      const std::string why = ep.ToString() + " joined twice: its first connection is still up";
      Log("plan coordinator: refused " + p.channel->peer() + ": " + why);
      p.channel->TurnAway(why);
      continue;
    }
    if (ep.side == PlanSide::kSource && !SourcesHoldStill(ep)) {
      later.push_back(std::move(p));
      continue;
    }
    // The ranks it must go around, first: its Connect needs no address for them.
    Status sent = SendPeersGone(*p.channel, ep);
    lost.erase(ep);
    const bool first_time = absent.erase(ep) > 0;
    joins[ep] = std::move(p.join);
    if (sent.ok()) sent = p.channel->Send(MessageType::kPlanPeers, PeerTable(ep, joins));
    if (!sent.ok()) {
      Log("plan coordinator: " + ep.ToString() + " could not be sent its peer table: " + sent.message());
      // As it was: lost (its old channel still counts in a version, which drops it), or a late
      // rank not here yet (it has no channel, so it must not count as a destination to drop).
      if (first_time) {
        absent.insert(ep);
        joins.erase(ep);
      } else {
        lost.insert(ep);
      }
      continue;
    }
    if (old != channels.end()) retired.push_back(std::move(old->second));  // its reader has ended
    ControlChannel* ch = p.channel.get();
    channels[ep] = std::move(p.channel);
    StartReader(ep, ch);
    for (auto& [other, och] : channels)  // the sources read from nobody
      if (other != ep && other.side == PlanSide::kDestination && !lost.count(other))
        SendTo(other, MessageType::kPlanPeers, PeerTable(other, joins));
    (first_time ? joined : rejoined).push_back(ep);
    Log("plan coordinator: " + ep.ToString() + (first_time ? " joined" : " joined again") +
        "; it takes part from the next version");
  }
  MutexLock lock(pending_mu);
  for (PendingJoin& p : later) pending.push_back(std::move(p));
}

Status PlanCoordinator::Impl::AwaitRejoins(const std::vector<Endpoint>& ranks, Clock::time_point deadline) {
  auto out = [&] {
    std::string names;
    for (const Endpoint& ep : ranks)
      if (std::find(rejoined.begin(), rejoined.end(), ep) == rejoined.end() &&
          std::find(joined.begin(), joined.end(), ep) == joined.end())
        names += (names.empty() ? "" : ", ") + ep.ToString();
    return names;
  };
  while (true) {
    AdmitRejoins();
    const std::string missing = out();
    if (missing.empty()) return Status::Ok();
    if (Clock::now() >= deadline) return Timeout(missing + " did not join again");
    if (options.should_stop && options.should_stop())
      return Cancelled("stopped while waiting for " + missing);
    auto e = Next(std::min(deadline, Clock::now() + session_timing::kRejoinEventPoll));
    if (!e) continue;
    if (!e->message.ok())
      Lose(e->from);
    else
      NoteReady(e->from, *e->message);
  }
}

Status PlanCoordinator::AwaitRejoins(const std::vector<Endpoint>& ranks, milliseconds timeout) {
  if (!impl_->options.rejoin)
    return FailedPrecondition("the coordinator does not take ranks back (rejoin is off)");
  Status s = impl_->AwaitRejoins(ranks, Clock::now() + timeout);
  if (s.code() == StatusCode::kTimeout)
    return Timeout(s.message() + " within " + std::to_string(timeout.count()) + " ms");
  return s;
}

}  // namespace weightport
