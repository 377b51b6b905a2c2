// What travels with a rank's part beside its Plan (rank_plan.h): every rank's arena layout and,
// for sources, where its shards lie in its device copy, as the whole plan gives them, with step ids
// and shard indices translated to the part's.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "arena_layout.h"

namespace weightport::plan_rank_internal {

struct PartDevice {
  std::vector<uint64_t> offsets;  // per shard of the part's buffer of that source
  uint64_t bytes = 0;             // the whole device copy
};

struct PartTables {
  std::map<Endpoint, arena_layout::ArenaLayout> layouts;
  std::map<Endpoint, PartDevice> devices;  // sources only
};

}  // namespace weightport::plan_rank_internal
