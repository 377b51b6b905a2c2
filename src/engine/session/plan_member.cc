#include "weightport/engine/session/plan_member.h"

#include <algorithm>
#include <thread>

#include "engine/session/session_timing.h"
#include "weightport/engine/session/plan_control.h"
#include "weightport/engine/session/plan_coordinator.h"
#include "weightport/plan/quantized.h"

namespace weightport {

JoinedRank::~JoinedRank() { Reset(); }

void JoinedRank::Reset() {
  member.reset();
  rank.reset();
  if (loop) loop->Stop();
  loop.reset();
}

Result<std::unique_ptr<JoinedRank>> JoinPlan(const Secret& secret, const PlanMemberOptions& options) {
  if (!options.make_transport) return InvalidArgument("PlanMemberOptions.make_transport is required");
  const Endpoint me = options.offer.endpoint;
  const auto deadline = std::chrono::steady_clock::now() + options.connect_timeout;
  auto j = std::make_unique<JoinedRank>();
  std::string coordinator = options.coordinator;
  if (options.find_coordinator) {
    WP_ASSIGN_OR_RETURN(coordinator, options.find_coordinator(options.connect_timeout));
  }
  WP_ASSIGN_OR_RETURN(RankPlan part, OfferLayout(std::string(ListenAddressOf(coordinator)), secret,
                                                 options.offer, options.connect_timeout));
  j->plan = part.plan;
  if (options.log)
    options.log(me.ToString() + ": its part of the plan: " + std::to_string(part.plan->steps.size()) +
                " of " + std::to_string(part.whole_steps) + " steps, " + std::to_string(part.peers().size()) +
                " peers, digest " + std::to_string(part.digest));
  WP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, options.make_transport(RankControlName(me)));
  j->loop = std::make_unique<ProgressLoop>(std::move(transport));
  WP_ASSIGN_OR_RETURN(j->rank, PlanRank::Create(part, *j->loop, options.rank));
  // The coordinator listens again once it has answered every offer: retry until it does.
  auto member = RetryWhileUnreachable(deadline, session_timing::kDialRetry, [&](auto time_left) {
    return PlanControl::Join(std::string(ListenAddressOf(coordinator)), secret, *j->rank, time_left);
  });
  if (!member.ok()) return member.status().WithContext(me.ToString() + ": joining " + coordinator);
  j->member = std::move(*member);
  j->coordinator = coordinator;
  return j;
}

std::string_view ListenAddressOf(std::string_view found) { return found.substr(0, found.find('#')); }

Result<std::unique_ptr<PlanControl>> RejoinPlan(PlanRank& rank, const Secret& secret,
                                                const PlanMemberOptions& options, std::string& coordinator) {
  using std::chrono::milliseconds;
  const Endpoint me = options.offer.endpoint;
  if (!options.find_coordinator)
    return FailedPrecondition(me.ToString() + ": no way to find a new coordinator");
  const auto deadline = std::chrono::steady_clock::now() + options.connect_timeout;
  auto left = [&] {
    return std::max(milliseconds(1),
                    std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()));
  };
  Status last = Timeout(me.ToString() + ": no coordinator took over within " +
                        std::to_string(options.connect_timeout.count()) + " ms");
  // Until the lost coordinator's lease runs out the store still names it: wait for another.
  while (std::chrono::steady_clock::now() < deadline) {
    auto address = options.find_coordinator(left());
    if (address.ok() && *address == coordinator) {
      std::this_thread::sleep_for(session_timing::kStorePoll);
      continue;
    }
    Result<RankPlan> part =
        address.ok() ? OfferLayout(std::string(ListenAddressOf(*address)), secret, options.offer, left())
                     : Result<RankPlan>(address.status());
    if (!part.ok()) {
      if (part.status().code() == StatusCode::kPermissionDenied) return part.status();  // refused
      last = part.status();
      std::this_thread::sleep_for(session_timing::kRendezvousDialRetry);
      continue;
    }
    if (part->digest != rank.plan_digest())
      return FailedPrecondition(me.ToString() + ": the coordinator at " + *address +
                                " planned something else (digest " + std::to_string(part->digest) +
                                ", this rank's is " + std::to_string(rank.plan_digest()) + ")");
    if (options.log) options.log(me.ToString() + ": joining the coordinator that took over, at " + *address);
    auto member = RetryWhileUnreachable(deadline, session_timing::kDialRetry, [&](auto time_left) {
      return PlanControl::Join(std::string(ListenAddressOf(*address)), secret, rank, time_left);
    });
    if (member.ok()) {
      coordinator = *address;
      return member;
    }
    last = member.status().WithContext(me.ToString() + ": joining " + *address);
  }
  return last;
}

TermWatch::TermWatch(std::function<Result<std::string>(std::chrono::milliseconds)> find,
                     std::chrono::milliseconds interval)
    : find_(std::move(find)), interval_(interval) {}

bool TermWatch::Replaced(const std::string& current) {
  if (!find_) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) return false;
  next_ = now + interval_;
  auto found = find_(session_timing::kStoreLookup);  // none yet (between terms): not replaced
  return found.ok() && *found != current;
}

PlanShardView ShardView(const Plan& plan, Endpoint me, size_t i, std::span<std::byte> bytes) {
  const RankBuffer& b = *plan.Buffer(me);
  const PlannedShard& s = b.shards.at(i);
  const TensorMeta& t = plan.tensors.at(s.tensor);
  PlanShardView v;
  v.tensor = t.name;
  v.dtype = me.side == PlanSide::kSource ? t.dtype : plan.destination_dtypes.at(s.tensor);
  v.shape = t.shape;
  v.slice = s.slice;
  v.bytes = bytes;
  if (me.side == PlanSide::kDestination && plan.Quantized(s.tensor)) {
    v.quantized = true;
    v.scale_offset = StoredScaleOffset(s.slice.num_elements());
    v.scale_blocks =
        *ScaleGridSlice(s.slice, t.shape, plan.Fp8ScalingOf(s.tensor));  // the plan was validated
  }
  return v;
}

}  // namespace weightport
