// Source replicas: shards that several source ranks hold with the same slice of the same tensor
// (DDP, HSDP replicas). The planner splits such a piece among them, so replicas that drifted apart
// would be spliced into one version without a word; instead each source digests its replicated
// shards when it publishes (PlanRank::replica_digests) and the coordinator compares the digests
// of each group before the version begins.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weightport/core/slice.h"
#include "weightport/plan/plan.h"

namespace weightport {

struct SourceReplicaGroup {
  uint32_t tensor = 0;
  std::string tensor_name;
  Slice slice;
  std::vector<std::pair<Endpoint, uint32_t>> holders;  // (source rank, its shard index), two or more
};

// Every group of sources holding the same slice of a tensor, by tensor, then slice.
std::vector<SourceReplicaGroup> SourceReplicaGroups(const Plan& plan);

// The shards of source `me` that another source holds with the same slice, ascending.
std::vector<uint32_t> ReplicatedShards(const std::vector<SourceReplicaGroup>& groups, Endpoint me);

// A shard's digest: xxh3-64 over the xxh3-64 of each 4 MiB block of its bytes (blocks hashed in
// parallel by whoever computes it; the same value either way).
inline constexpr uint64_t kReplicaBlockBytes = 4ull << 20;

// The groups whose holders reported different digests for one version, named: "tensor 'w' [0:48,
// 0:40]: src rank 0 and src rank 1 hold different bytes" (up to `limit` groups, then how many more);
// empty when every group agrees. `digest_of(holder)` gives a holder's digest, or nullopt when it
// has none for this version (it is then left out of the comparison).
std::string DescribeDivergence(const std::vector<SourceReplicaGroup>& groups,
                               const std::function<std::optional<uint64_t>(Endpoint, uint32_t)>& digest_of,
                               size_t limit = 3);

// Why source `lost`, holding `shards` shards, cannot be stood in for by its replicas: empty when
// each of its shards is in a group with another holder for which `live` is true; else which slice
// no live source holds ("tensor 'w' [0:48, 0:40] has no live replica"), or that some of its shards
// have no replica at all.
std::string MissingReplicas(const std::vector<SourceReplicaGroup>& groups, Endpoint lost, size_t shards,
                            const std::function<bool(Endpoint)>& live);

}  // namespace weightport
