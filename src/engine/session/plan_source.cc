#include "weightport/engine/session/plan_source.h"

#include <string>
#include <utility>

namespace weightport {

SourceFollower::SourceFollower(PlanRank& rank, PlanControl& member, bool rotate_keys, SourceHooks hooks)
    : rank_(rank), member_(&member), rotate_keys_(rotate_keys), hooks_(std::move(hooks)) {}

Result<PlanControl::Event> SourceFollower::Next(std::chrono::milliseconds timeout) {
  connection_failed_ = false;
  while (true) {
    if (hooks_.should_stop && hooks_.should_stop()) return Cancelled("the source is closing");
    auto e = member_->Next(timeout);
    if (!e.ok() && e.status().code() == StatusCode::kTimeout && hooks_.replaced && hooks_.replaced())
      e = Unavailable("the coordinator's term is over: the store names another");
    else if (!e.ok() && e.status().code() == StatusCode::kTimeout && hooks_.should_stop)
      continue;
    if (!e.ok()) {
      connection_failed_ = true;
      return e.status();
    }
    switch (e->kind) {
      case PlanControl::Event::kRekey: {
        if (!hooks_.rekey)
          return FailedPrecondition(rank_.endpoint().ToString() +
                                    ": the coordinator rotates keys and this rank cannot move");
        WP_RETURN_IF_ERROR(hooks_.rekey(e->version));
        WP_RETURN_IF_ERROR(member_->SendKeys(rank_));
        auto it = held_.find(e->version);
        if (it == held_.end()) break;
        PlanControl::Event verdict = std::move(it->second);
        held_.erase(it);
        return verdict;
      }
      case PlanControl::Event::kPeers:
        WP_RETURN_IF_ERROR(rank_.Connect(e->peers));  // memory stays where it is
        break;
      case PlanControl::Event::kCommit:
      case PlanControl::Event::kAbort:
        if (!rotate_keys_) return e;
        if (hooks_.held) WP_RETURN_IF_ERROR(hooks_.held(*e));
        held_[e->version] = std::move(*e);
        break;
      default:
        return e;
    }
  }
}

}  // namespace weightport
