#include "weightport/engine/rank/relay_headroom.h"

#include <set>
#include <string>

namespace weightport {

Result<double> RelayInboundCap(const Plan& plan, Endpoint me, double headroom) {
  if (!(headroom < 1))
    return InvalidArgument("relay headroom " + std::to_string(headroom) + " is not below 1");
  const RankBuffer* mine = me.side == PlanSide::kDestination ? plan.Buffer(me) : nullptr;
  if (mine == nullptr) return InvalidArgument(me.ToString() + " is not a destination rank of the plan");
  if (headroom <= 0) return 0.0;
  bool relays = false;
  std::set<std::pair<int, int>> remote_peers;  // {side, rank} on another host
  for (const PlanStep& step : plan.steps) {
    if (step.from == me) relays = true;
    if (step.to_rank != me.rank) continue;
    const RankBuffer* from = plan.Buffer(step.from);
    if (from != nullptr && from->host != mine->host)
      remote_peers.insert({static_cast<int>(step.from.side), step.from.rank});
  }
  if (!relays || remote_peers.size() < 2 || mine->host < 0) return 0.0;
  return (1 - headroom) * plan.topology.nic_bytes_per_s(mine->host);
}

}  // namespace weightport
