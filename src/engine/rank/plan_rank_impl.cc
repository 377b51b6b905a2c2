// What plan_rank_impl.h declares for every part of a rank: the hash of a chunk's runs, and the
// closing of the rank's connections.
#include "plan_rank_impl.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace weightport {

using namespace plan_rank_internal;

uint64_t plan_rank_internal::HashRuns(const std::byte* base, const std::vector<Run>& runs, uint32_t begin,
                                      uint32_t end, uint64_t Run::*offset) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (uint32_t i = begin; i < end; ++i) XXH3_64bits_update(&state, base + runs[i].*offset, runs[i].length);
  return XXH3_64bits_digest(&state);
}

void PlanRank::Impl::CloseConnections() {
  for (auto& [ep, conn] : connections) conn->Close();
  connections.clear();
  keys.clear();
  addresses.clear();
  source_devices.clear();
}

}  // namespace weightport
