#include <algorithm>

#include "plan/plan_pieces.h"
#include "weightport/plan/planner.h"

namespace weightport {
namespace {

struct Written {
  int64_t lo, hi;
  uint32_t step;
};

}  // namespace

Status CheckCoverage(const Plan& plan) {
  WP_RETURN_IF_ERROR(plan.Validate());
  // writes[b][s]: the steps writing shard s of destination buffer b.
  std::vector<std::vector<std::vector<Written>>> writes(plan.destinations.size());
  for (size_t b = 0; b < plan.destinations.size(); ++b) writes[b].resize(plan.destinations[b].shards.size());
  for (const PlanStep& step : plan.steps) {
    const RankBuffer* to = plan.Buffer({PlanSide::kDestination, step.to_rank});
    auto [lo, hi] = plan_internal::SliceBounds(step.piece, plan.tensors[step.tensor].shape);
    writes[to - plan.destinations.data()][step.to_shard].push_back({lo, hi, step.id});
  }
  for (size_t b = 0; b < plan.destinations.size(); ++b) {
    for (size_t s = 0; s < writes[b].size(); ++s) {
      const PlannedShard& shard = plan.destinations[b].shards[s];
      const TensorMeta& t = plan.tensors[shard.tensor];
      const std::string what = "dst rank " + std::to_string(plan.destinations[b].endpoint.rank) + " shard " +
                               std::to_string(s) + " (tensor '" + t.name + "' " + shard.slice.ToString() +
                               ")";
      std::vector<Written>& list = writes[b][s];
      int64_t elements = 0;
      for (const Written& w : list) elements += plan.steps[w.step].piece.num_elements();
      if (elements != shard.slice.num_elements())
        return FailedPrecondition(what + ": its steps write " + std::to_string(elements) + " of its " +
                                  std::to_string(shard.slice.num_elements()) + " elements");
      std::sort(list.begin(), list.end(), [](const Written& a, const Written& c) { return a.lo < c.lo; });
      for (size_t i = 0; i < list.size(); ++i)
        for (size_t j = i + 1; j < list.size() && list[j].lo < list[i].hi; ++j) {
          WP_ASSIGN_OR_RETURN(bool overlap, Overlaps(plan.steps[list[i].step].piece,
                                                     plan.steps[list[j].step].piece, t.shape));
          if (overlap)
            return FailedPrecondition(what + ": steps " + std::to_string(list[i].step) + " and " +
                                      std::to_string(list[j].step) + " write the same elements");
        }
    }
  }
  return Status::Ok();
}

}  // namespace weightport
