// Relay and detour, a part of the receive (receive_run.h): a relayed step's chunks released as
// polls of its relay's counter show them verified there, and a step routed upstream of a relay that
// is lost or failed.
#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "receive_run.h"

namespace weightport {
namespace plan_rank_internal {

using namespace arena_layout;

bool ReceiveRun::Detour(size_t st) {
  r_.OnLoopThread();  // a task of the loop thread
  const InStep& step = r_.c->in_steps[st];
  if (step.after < 0) return ToReplica(st);  // its source is lost: a replica of it, if any
  uint32_t next = level_[st] + 1;
  while (next < step.detour_levels && r_.lost_peers.count(LevelFrom(st, next))) ++next;  // never the source
  if (next > step.detour_levels) return false;
  if (level_[st] == 0) ++stats_.rerouted_steps;
  level_[st] = next;
  if (DetourAt(st, next).counter < 0) {
    level_ready_[st] = 1;
    Unpark(st);
    Release(st, step.chunks);
    return true;
  }
  // A relay upstream: its copy of this version is known from its counter; until then the
  // released chunks wait.
  ++stats_.rerouted_via_relay;
  level_ready_[st] = 0;
  Poll(st);
  return true;
}

void ReceiveRun::Unpark(size_t st) {
  for (size_t c : parked_[st]) ready_.push({0, 0, false, c});
  parked_[st].clear();
}

void ReceiveRun::DetourOrFail(size_t st, Status why) {
  if (!Detour(st)) return Fail(std::move(why));
  Issue();
  MaybeFinish();
}

void ReceiveRun::OnPeerLost(Endpoint peer) {
  if (failed_ || mirrors_left_ > 0) return;
  if (peer.side == PlanSide::kSource) RootSourceLost(peer);
  if (failed_) return MaybeFinish();
  for (size_t st = 0; st < r_.c->in_steps.size(); ++st) {
    const InStep& step = r_.c->in_steps[st];
    if (step.after < 0 || CurrentFrom(st) != peer || Detour(st)) continue;
    return Fail(Unavailable(r_.StepName(step.step) + ": " + peer.ToString() +
                            ", which it reads from, is lost and the step cannot be fetched from its source"));
  }
  Issue();
  MaybeFinish();
}

void ReceiveRun::Release(size_t st, uint32_t upto) {
  const InStep& s = r_.c->in_steps[st];
  upto = std::min(upto, s.chunks);
  for (uint32_t k = released_[st]; k < upto; ++k) ready_.push({1, k, s.my_counter < 0, s.first_chunk + k});
  released_[st] = std::max(released_[st], upto);
}

void ReceiveRun::Poll(size_t st) {
  r_.OnLoopThread();  // a task of the loop thread
  const InStep& s = r_.c->in_steps[st];
  const uint32_t level = level_[st];
  const Endpoint from = CurrentFrom(st);
  // A lost rank left out of the peer table after a rekey has no connection (PlanRank::Connect).
  if (!r_.connections.count(from))
    return Fail(FailedPrecondition(r_.c->me.ToString() + ": " + r_.StepName(s.step) + " reads from " +
                                   from.ToString() + ", which is lost, and has no way around it"));
  const uint64_t counter = level == 0 ? s.sender_counter : static_cast<uint64_t>(DetourAt(st, level).counter);
  ++in_flight_;
  ++stats_.polls;
  auto self = shared_from_this();
  Conn(from).Get(*r_.arena, s.poll_scratch, r_.keys.at(from), counter, kCounterBytes,
                 [self, st, level](const Status& status) { self->OnPoll(st, level, status); });
}

void ReceiveRun::OnPoll(size_t st, uint32_t level, const Status& s) {
  --in_flight_;
  // A poll of a rank the step no longer reads from is no news.
  if (failed_ || level != level_[st]) return MaybeFinish();
  const InStep& step = r_.c->in_steps[st];
  const Endpoint from = CurrentFrom(st);
  if (!s.ok() && Fatal(s, Conn(from)))
    return DetourOrFail(st, s.WithContext(r_.StepName(step.step) + ": progress of " + from.ToString()));
  bool progressed = false;
  // A torn or corrupt read of the counter fails its check and is no news.
  const std::optional<uint64_t> counter = s.ok() ? LoadCounter(r_.at(step.poll_scratch)) : std::nullopt;
  if (counter) {
    const uint64_t word = *counter;
    if (CounterVersion(word) == v_ && CounterPrefix(word) == kRelayFailed)
      return DetourOrFail(st, Unavailable(r_.StepName(step.step) + ": " + from.ToString() +
                                          ", which it reads from, failed version " + std::to_string(v_)));
    if (CounterVersion(word) == v_ && (CounterPrefix(word) > released_[st] || !level_ready_[st])) {
      sender_copy_[st] = CounterCopy(word);
      if (!level_ready_[st]) {
        level_ready_[st] = 1;
        Unpark(st);
      }
      Release(st, CounterPrefix(word));
      progressed = true;
    }
  }
  if (released_[st] < step.chunks || !level_ready_[st]) {
    // Poll again: at once while the relay makes progress, with growing pauses while it does not.
    auto& backoff = poll_backoff_[st];
    backoff = progressed ? r_.options.backoff_initial : std::min(r_.options.relay_poll_max, backoff * 2);
    auto self = shared_from_this();
    r_.loop->PostAfter(progressed ? std::chrono::milliseconds(0) : backoff, [self, st, level](Transport&) {
      // Once reported (every chunk verified, some of them kept) nothing more is read.
      if (!self->failed_ && !self->reported_ && self->level_[st] == level) self->Poll(st);
      self->MaybeFinish();
    });
  }
  Issue();
  MaybeFinish();  // the chunks it released may all be kept already
}

}  // namespace plan_rank_internal

}  // namespace weightport
