#include "weightport/engine/session/plan_member.h"

#include "weightport/engine/session/reshard_coordinator.h"
#include "weightport/engine/session/reshard_member.h"
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
  WP_ASSIGN_OR_RETURN(RankPlan part,
                      OfferLayout(options.coordinator, secret, options.offer, options.connect_timeout));
  j->plan = part.plan;
  if (options.log)
    options.log(me.ToString() + ": its part of the plan: " + std::to_string(part.plan->steps.size()) +
                " of " + std::to_string(part.whole_steps) + " steps, " + std::to_string(part.peers().size()) +
                " peers, digest " + std::to_string(part.digest));
  WP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, options.make_transport(ReshardName(me)));
  j->loop = std::make_unique<ProgressLoop>(std::move(transport));
  WP_ASSIGN_OR_RETURN(j->rank, PlanRank::Create(part, *j->loop, options.rank));
  // The coordinator listens again once it has answered every offer: retry until it does.
  auto member = RetryWhileUnreachable(deadline, std::chrono::milliseconds(100), [&](auto time_left) {
    return ReshardMember::Join(options.coordinator, secret, *j->rank, time_left);
  });
  if (!member.ok()) return member.status().WithContext(me.ToString() + ": joining " + options.coordinator);
  j->member = std::move(*member);
  return j;
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
