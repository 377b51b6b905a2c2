#include "weightport/engine/session/plan_destination.h"

#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "weightport/engine/session/plan_control.h"

namespace weightport {

Status FollowAsDestination(PlanRank& rank, PlanControl& first, std::chrono::milliseconds timeout,
                           const DestinationHooks& hooks) {
  std::thread receiver;
  uint64_t receiving = 0;  // the version the receiver thread works on, 0 when none
  Status problem;
  std::map<Endpoint, PlanPeer> table;  // the newest peer table after a rekey, until connected to
  // The member in use and what this rank last reported and has no verdict for: the receiver thread
  // reports through `member`, and after a reconnect the report goes again to the new coordinator.
  std::mutex mu;
  PlanControl* member = &first;
  Status send_error;                                       // a report that could not be sent (no reconnect)
  std::optional<ReceiveStats> verified;                    // verified, no verdict yet
  std::optional<std::pair<uint64_t, std::string>> failed;  // failed, no verdict yet
  auto report = [&](uint64_t v, const Result<ReceiveStats>& r) {
    std::lock_guard<std::mutex> lock(mu);
    if (r.ok())
      verified = *r;
    else
      failed.emplace(v, r.status().message());
    Status sent = r.ok() ? member->Verified(*r) : member->Failed(v, r.status().message());
    if (!sent.ok() && !hooks.reconnect && send_error.ok())
      send_error = sent;  // else: sent again after the reconnect
  };
  auto decided = [&](uint64_t v) {
    std::lock_guard<std::mutex> lock(mu);
    if (verified && verified->version == v) verified.reset();
    if (failed && failed->first == v) failed.reset();
  };
  auto join = [&] {
    if (receiver.joinable()) receiver.join();
    receiving = 0;
    std::lock_guard<std::mutex> lock(mu);
    if (problem.ok() && !send_error.ok()) problem = send_error;
  };
  while (true) {
    auto e = member->Next(timeout);
    if (!e.ok() && e.status().code() == StatusCode::kTimeout && hooks.reconnect && hooks.replaced &&
        hooks.replaced())
      e = Unavailable("the coordinator's term is over: the store names another");
    else if (!e.ok() && e.status().code() == StatusCode::kTimeout && hooks.should_stop &&
             !hooks.should_stop())
      continue;
    if (!e.ok() && hooks.should_stop && hooks.should_stop()) e = Cancelled("the destination is closing");
    if (!e.ok() && hooks.reconnect && e.status().code() != StatusCode::kCancelled) {
      join();  // the receive finishes; its report goes to the next coordinator
      auto fresh = hooks.reconnect();
      if (!fresh.ok()) return fresh.status().WithContext("lost the coordinator: " + e.status().message());
      std::lock_guard<std::mutex> lock(mu);
      member = *fresh;
      Status sent;
      if (verified) sent = member->Verified(*verified);
      if (sent.ok() && failed) sent = member->Failed(failed->first, failed->second);
      if (!sent.ok()) return sent.WithContext("reporting to the new coordinator");
      continue;
    }
    if (!e.ok()) {
      if (receiving != 0) rank.Cancel(receiving, "lost the coordinator");
      join();
      return e.status();
    }
    const uint64_t v = e->version;
    switch (e->kind) {
      case PlanControl::Event::kBegin: {
        join();
        // A rekey's table is dialled when a version needs it: after the last version nothing
        // dials ranks that are ending (UCX does not survive a worker closed mid wire-up). A relay
        // that cannot be dialled left after sending its keys, before the coordinator saw it go: it
        // is routed around like a lost one. A source still unreachable fails this version; the
        // table is dialled again at the next one.
        std::vector<Endpoint> unreachable;
        Status ready = table.empty() ? Status::Ok() : rank.Connect(table, &unreachable);
        if (ready.ok()) table.clear();
        if (!ready.ok() && ready.code() != StatusCode::kUnavailable && ready.code() != StatusCode::kIoError)
          return ready;  // a table that does not fit the plan
        if (ready.ok() && hooks.before_receive) ready = hooks.before_receive(v);
        if (!ready.ok()) {
          // Fail the version at the rank too: its relay counters say so, and the ranks relaying
          // from it go to the sources instead of waiting for it.
          rank.Cancel(v, ready.message());
          rank.Receive(v).status().IgnoreError();
          report(v, ready);
          continue;
        }
        receiving = v;
        receiver = std::thread([&rank, &hooks, &report, v] {
          auto r = rank.Receive(v);
          if (hooks.received) hooks.received(v, r);
          report(v, r);
        });
        break;
      }
      case PlanControl::Event::kRollback: {
        // A local copy from what this rank kept: done here, no transfer to cancel.
        join();
        Status ready = hooks.before_receive ? hooks.before_receive(v) : Status::Ok();
        Result<ReceiveStats> restored = ready.ok() ? rank.Restore(v) : Result<ReceiveStats>(ready);
        if (hooks.received) hooks.received(v, restored);
        report(v, restored);
        break;
      }
      case PlanControl::Event::kCommit: {
        join();
        decided(v);
        // A coordinator that took over sends the verdict on record again: a rank that swapped
        // already only says so.
        // A rollback to the live version restored it into staging: nothing to swap either.
        Status s = rank.live_version() == v ? Status::Ok() : rank.Commit(v);
        if (s.ok() && hooks.committed && rank.live_version() == v) s = hooks.committed(v);
        if (!s.ok() && problem.ok()) problem = s;
        Status sent = member->Committed(v);
        if (!sent.ok() && !hooks.reconnect) return sent;
        break;
      }
      case PlanControl::Event::kAbort:
        if (receiving == v) rank.Cancel(v, "the coordinator aborted version " + std::to_string(v));
        join();
        decided(v);
        rank.Abort(v);
        if (hooks.aborted) hooks.aborted(v, e->reason);
        break;
      case PlanControl::Event::kPeerLost:
        rank.PeerLost(e->peer);
        table.erase(e->peer);  // routed around, not dialled
        break;
      case PlanControl::Event::kRekey: {
        join();
        if (!hooks.rekey)
          return FailedPrecondition(rank.endpoint().ToString() +
                                    ": the coordinator rotates keys and this rank cannot move");
        WP_RETURN_IF_ERROR(hooks.rekey(v));
        WP_RETURN_IF_ERROR(member->SendKeys(rank));
        break;
      }
      case PlanControl::Event::kPeers:
        table = std::move(e->peers);
        break;
      case PlanControl::Event::kBye:
        join();
        return problem;
    }
  }
}

}  // namespace weightport
