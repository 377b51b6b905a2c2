// What a plan session's control plane would send for a plan: every rank's part (rank_plan.h)
// against the whole plan as JSON, which is what every rank received before parts existed.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "weightport/core/status.h"
#include "weightport/plan/plan.h"

namespace weightport::cli {

struct RankPlanSizes {
  uint64_t plan_json_bytes = 0;    // the whole plan as JSON (Plan::JsonBytes)
  uint64_t plan_binary_bytes = 0;  // the whole plan in binary (plan_binary.h)
  uint64_t max_rank_plan_bytes = 0;
  uint64_t median_rank_plan_bytes = 0;
  uint64_t total_rank_plan_bytes = 0;
  std::string largest_rank;  // whose part is the largest
  uint64_t max_rank_plan_steps = 0;
  uint64_t max_rank_peers = 0;
  double cut_s = 0;  // indexing the plan, then cutting and encoding every part on a few threads
};

// Cuts and encodes every rank's part of `plan` (the parts are dropped as they are measured).
Result<RankPlanSizes> MeasureRankPlans(const Plan& plan);

nlohmann::ordered_json RankPlanSizesJson(const RankPlanSizes& sizes);

}  // namespace weightport::cli
