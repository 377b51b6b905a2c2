// Plan rendezvous: ranks that each know only their own part of a layout get one plan.
//
// A trainer rank knows which slices of which tensors it holds; an inference replica knows its own.
// Before any weights move, every rank of both sides connects to the coordinator and offers its part
// (LayoutOffer: side, rank, ranks on its side, host name, its shards as Placement JSON). Once every
// rank of both sides has offered, the coordinator merges each side's offers into one Placement,
// builds the Topology from the host names (ranks naming the same host share it), runs MakePlan once
// and answers every rank with its part of the plan (PlanAssign carrying a RankPlan, rank_plan.h):
// the steps it sends, receives or relays and what they need, in binary, so no rank receives or
// parses the whole plan however many ranks there are. A problem (two ranks disagreeing about a
// tensor's dtype or shape, a rank offered twice, sides disagreeing about their size, no plan) is
// sent to every rank as Refused, naming the rank and tensor, and returned.
//
// The ranks then compile their PlanRank from their part and join the PlanCoordinator
// (plan_coordinator.h) on the same listener, as ranks given the plan up front do.
//
// Thread-safety: free functions; each call from one thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weightport/control/channel.h"
#include "weightport/core/placement.h"
#include "weightport/core/status.h"
#include "weightport/engine/rank/rank_plan.h"
#include "weightport/plan/plan.h"
#include "weightport/plan/planner.h"

namespace weightport {

struct LayoutOffer {
  Endpoint endpoint;
  int side_ranks = 1;   // ranks on this rank's side (ranks are 0 .. side_ranks - 1)
  std::string host;     // ranks that name the same host are planned as sharing it
  Placement placement;  // this rank's shards only (the tensors it names, and rank endpoint.rank)
};

struct RendezvousOptions {
  PlanOptions plan;
  double nic_gbps = Topology::kDefaultNicGbps;
  double intra_host_gbps = Topology::kDefaultIntraHostGbps;
  std::chrono::milliseconds timeout{60'000};  // for every offer to arrive
  std::function<void(std::string)> log;
  std::function<bool()> should_stop;  // polled while waiting: true ends the wait with Cancelled
};

// Merges offers of one side into its Placement: the union of the tensors (the same name must have
// the same dtype and shape everywhere) and each rank's shards. Errors name the ranks and tensor.
Result<Placement> MergeOffers(const std::vector<LayoutOffer>& offers);

// The Topology of the offers: one host per distinct host name, in the order first named.
Result<Topology> TopologyOfOffers(const std::vector<LayoutOffer>& offers, double nic_gbps,
                                  double intra_host_gbps);

// Merges both sides and plans: the pure part of the coordinator's rendezvous.
Result<std::shared_ptr<const Plan>> PlanFromOffers(const std::vector<LayoutOffer>& offers,
                                                   const RendezvousOptions& options);

// What the coordinator's rendezvous leaves: the whole plan, and what each rank was sent.
struct PlannedSession {
  std::shared_ptr<const Plan> plan;
  uint64_t digest = 0;
  std::map<Endpoint, std::vector<Endpoint>> peers;  // per rank, the other ranks of its part
  uint64_t max_part_bytes = 0;                      // the largest PlanAssign payload
  uint64_t total_part_bytes = 0;
  double plan_seconds = 0;  // merging the offers and planning
  double send_seconds = 0;  // cutting, encoding and sending every rank its part
};

// The coordinator's side: accepts connections on `listener` until every rank of both sides offered
// (the side sizes come from the offers), plans, and answers each with its part; then closes the
// connections.
Result<PlannedSession> CollectLayoutsAndPlan(ControlListener& listener, const RendezvousOptions& options);

// For a rank that starts again once the session runs (PlanCoordinatorOptions::rejoin_offer):
// its part of `plan` (cut by `cutter`, made from it), as PlanAssign's payload, when `offer` (a
// LayoutOffer from `peer`) names a rank of the plan and the shards the plan gives it; else the
// error, naming the rank.
Result<Bytes> AssignForRejoin(const Plan& plan, const RankPlanCutter& cutter, const ControlMessage& offer,
                              const std::string& peer);

// A rank's side: connects to "host:port" (retrying while the coordinator is not listening yet, up to
// `timeout`), offers, and waits for its part of the plan. PermissionDenied with the coordinator's
// reason when it refuses.
Result<RankPlan> OfferLayout(const std::string& coordinator, const Secret& secret, const LayoutOffer& offer,
                             std::chrono::milliseconds timeout);

}  // namespace weightport
