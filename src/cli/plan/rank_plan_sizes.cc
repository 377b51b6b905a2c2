#include "rank_plan_sizes.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "weightport/engine/rank/rank_plan.h"
#include "weightport/plan/plan_binary.h"

namespace weightport::cli {

Result<RankPlanSizes> MeasureRankPlans(const Plan& plan) {
  RankPlanSizes out;
  out.plan_json_bytes = plan.JsonBytes();
  out.plan_binary_bytes = EncodePlanBinary(plan).size();
  const auto start = std::chrono::steady_clock::now();
  // The plan outlives the cutter: a shared_ptr that does not own it.
  RankPlanCutter cutter(std::shared_ptr<const Plan>(std::shared_ptr<const Plan>(), &plan));
  std::vector<Endpoint> ranks;
  for (const auto* side : {&plan.sources, &plan.destinations})
    for (const RankBuffer& b : *side) ranks.push_back(b.endpoint);
  std::vector<uint64_t> sizes(ranks.size());
  std::vector<uint64_t> steps(ranks.size()), peers(ranks.size());
  // As the coordinator does: on a few threads, each part dropped once measured.
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  WP_RETURN_IF_ERROR(cutter.CutEach(ranks, threads, [&](size_t i, RankPlan&& part, std::string&& encoded) {
    sizes[i] = encoded.size();
    steps[i] = part.plan->steps.size();
    peers[i] = part.peers().size();
    return Status::Ok();
  }));
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (sizes[i] > out.max_rank_plan_bytes) {
      out.max_rank_plan_bytes = sizes[i];
      out.largest_rank = ranks[i].ToString();
    }
    out.total_rank_plan_bytes += sizes[i];
    out.max_rank_plan_steps = std::max(out.max_rank_plan_steps, steps[i]);
    out.max_rank_peers = std::max(out.max_rank_peers, peers[i]);
  }
  out.cut_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!sizes.empty()) {
    std::nth_element(sizes.begin(), sizes.begin() + sizes.size() / 2, sizes.end());
    out.median_rank_plan_bytes = sizes[sizes.size() / 2];
  }
  return out;
}

nlohmann::ordered_json RankPlanSizesJson(const RankPlanSizes& s) {
  return {{"plan_json_bytes", s.plan_json_bytes},
          {"plan_binary_bytes", s.plan_binary_bytes},
          {"max_rank_plan_bytes", s.max_rank_plan_bytes},
          {"median_rank_plan_bytes", s.median_rank_plan_bytes},
          {"total_rank_plan_bytes", s.total_rank_plan_bytes},
          {"largest_rank", s.largest_rank},
          {"max_rank_plan_steps", s.max_rank_plan_steps},
          {"max_rank_peers", s.max_rank_peers},
          {"cut_s", s.cut_s}};
}

}  // namespace weightport::cli
