// What plan_rank_impl.h declares for every part of a rank: the hash of a chunk's runs, and the
// closing of the rank's connections.
#include "plan_rank_impl.h"

#include "weightport/core/hash.h"

namespace weightport {

using namespace plan_rank_internal;

uint64_t plan_rank_internal::HashRuns(const std::byte* base, const std::vector<Run>& runs, uint32_t begin,
                                      uint32_t end, uint64_t Run::*offset) {
  Xxh3Stream stream;
  for (uint32_t i = begin; i < end; ++i) stream.Update(base + runs[i].*offset, runs[i].length);
  return stream.Digest();
}

void PlanRank::Impl::CloseConnections() {
  for (auto& [ep, conn] : connections) conn->Close();
  connections.clear();
  keys.clear();
  addresses.clear();
  source_devices.clear();
}

}  // namespace weightport
