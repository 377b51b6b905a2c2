// What PlanPublisher and PlanSubscriber share: a rank that offered its layout, compiled the plan it
// got back, registered its arena and joined the coordinator.
#pragma once

#include <memory>

#include "weightport/engine/session/plan_session.h"
#include "weightport/engine/session/reshard.h"
#include "weightport/transport/progress_loop.h"

namespace weightport {

struct JoinedRank {
  std::shared_ptr<const Plan> plan;
  std::unique_ptr<ProgressLoop> loop;  // declared before rank: the rank is destroyed first
  std::unique_ptr<PlanRank> rank;
  std::unique_ptr<ReshardMember> member;

  ~JoinedRank();
  // Closes the control connection, then frees the arena, then stops the loop.
  void Reset();
  // The coordinator's Rekey: moves the rank to a fresh transport, closes the old one (the keys
  // peers hold for it stop working) and sends the new keys.
  Status Rekey(const TransportFactory& make_transport);
};

Result<std::unique_ptr<JoinedRank>> JoinPlan(const Secret& secret, const PlanMemberOptions& options);

// The views of a rank's shards (`bytes` from `shard_bytes`, empty when null).
PlanShardView ShardView(const Plan& plan, Endpoint me, size_t i, std::span<std::byte> bytes);

}  // namespace weightport
