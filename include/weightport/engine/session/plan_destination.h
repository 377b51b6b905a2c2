// A destination rank following the coordinator's versions (the protocol: plan_coordinator.h).
//
// Thread-safety: FollowAsDestination from one thread; it receives on a thread of its own inside.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "weightport/core/status.h"
#include "weightport/engine/rank/plan_rank.h"
#include "weightport/engine/session/plan_control.h"

namespace weightport {

// What a destination does around each step of FollowAsDestination; every hook is optional.
struct DestinationHooks {
  // Before receiving `version`; an error is reported as that update's failure instead.
  std::function<Status(uint64_t version)> before_receive;
  // After Receive(version), on the receiving thread.
  std::function<void(uint64_t version, const Result<ReceiveStats>&)> received;
  // After the swap to `version`; an error is returned at the end (the run goes on).
  std::function<Status(uint64_t version)> committed;
  std::function<void(uint64_t version, const std::string& why)> aborted;
  // On the coordinator's Rekey after `version`: moves the rank to a fresh transport
  // (PlanRank::Rekey); the keys are then sent. Without it a Rekey ends the run with an error.
  std::function<Status(uint64_t version)> rekey;
  // With this hook, a wait for an instruction that times out is not an error: the wait goes on
  // until this returns true (then FollowAsDestination returns Cancelled). Without it, it is.
  std::function<bool()> should_stop;
  // A coordinator that can fail: when the control connection is lost, this joins the coordinator
  // that took over and returns the member to follow from now on (the caller owns it; the old one
  // stays valid until this returns). A receive under way is not cancelled: it finishes, and its
  // report, or that of a version verified and still waiting for its verdict, goes to the new
  // coordinator, which sends the verdict on record or runs the version to one. Without it, a lost
  // connection ends the run (and cancels the receive).
  std::function<Result<PlanControl*>()> reconnect;
  // With reconnect: asked while no instruction comes; true when the coordinator was replaced
  // although its connection is open (TermWatch): the rank then reconnects as if it were lost.
  std::function<bool()> replaced;
};

// Runs a destination rank until the coordinator says Bye: receives each version it is told to on a
// thread of its own (so that an Abort arriving meanwhile cancels it, and the ranks that relay from
// this one stop waiting), reports, and commits or aborts as told; a PeerLost goes to the rank
// (PlanRank::PeerLost) at once, also while it receives. `timeout` bounds each wait for an
// instruction. Returns the first error of a hook or of the control connection.
Status FollowAsDestination(PlanRank& rank, PlanControl& member, std::chrono::milliseconds timeout,
                           const DestinationHooks& hooks);

}  // namespace weightport
