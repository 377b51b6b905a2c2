// A source rank following the coordinator (the protocol: plan_coordinator.h): after each
// PlanReady, the verdict on its version; with rotate_keys, after each verdict, the move to a fresh
// transport and the new peer table.
//
// Thread-safety: a SourceFollower from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>

#include "weightport/core/status.h"
#include "weightport/engine/rank/plan_rank.h"
#include "weightport/engine/session/plan_control.h"

namespace weightport {

// What a source does around the coordinator's instructions (SourceFollower); every hook is optional.
struct SourceHooks {
  // On the coordinator's Rekey after `version`: moves the rank to a fresh transport
  // (MoveToFreshTransport); the keys are then sent. Without it a Rekey is an error.
  std::function<Status(uint64_t version)> rekey;
  // With rotate_keys: a verdict (kCommit or kAbort) that is about to be held for the Rekey after
  // it. An error is returned by Next instead, and the verdict is not held.
  std::function<Status(const PlanControl::Event& verdict)> held;
  // Asked before each wait for an instruction: true makes Next return Cancelled. With this hook, a
  // wait that times out is not an error: Next asks again and waits on. Without it, it is.
  std::function<bool()> should_stop;
  // Asked when a wait times out: true when the coordinator was replaced although its connection is
  // open (TermWatch); Next then returns Unavailable with connection_failed(), as for a lost one.
  std::function<bool()> replaced;
};

// The coordinator's verdicts on a source's versions, one call of Next per verdict.
class SourceFollower {
 public:
  // `rotate_keys`: the rank was created with PlanRankOptions::rotate_keys.
  SourceFollower(PlanRank& rank, PlanControl& member, bool rotate_keys, SourceHooks hooks = {});

  // The coordinator's next verdict (kCommit, or kAbort with its reason) or its Bye (kBye); another
  // instruction (kBegin, kPeerLost: the coordinator sends those to destinations) is returned as it
  // comes. On the way, a Rekey moves the rank (hooks.rekey) and sends its new keys
  // (PlanControl::SendKeys), and a peer table is connected to (PlanRank::Connect). With
  // rotate_keys a verdict is held until the Rekey of its version has moved the rank, and only then
  // returned: the next version must not be written while a dropped peer's old key still reaches the
  // arena. `timeout` bounds each wait for an instruction; a verdict held when Next returns stays
  // held for the next call. Errors: the control connection's (Timeout included), a hook's, a move's
  // or a connect's.
  Result<PlanControl::Event> Next(std::chrono::milliseconds timeout);

  // With rotate_keys: the verdicts decided and still waiting for their Rekey, by version.
  const std::map<uint64_t, PlanControl::Event>& held() const { return held_; }
  // Whether the last error of Next was the control connection's (the wait for an instruction), not
  // a hook's, a move's or a connect's.
  bool connection_failed() const { return connection_failed_; }
  // Follows `member` from now on: the coordinator that took over from a lost one.
  void Rebind(PlanControl& member) { member_ = &member; }

 private:
  PlanRank& rank_;
  PlanControl* member_;
  bool rotate_keys_;
  SourceHooks hooks_;
  std::map<uint64_t, PlanControl::Event> held_;
  bool connection_failed_ = false;
};

}  // namespace weightport
