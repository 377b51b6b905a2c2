#include "weightport/engine/rank/source_replicas.h"

#include <algorithm>
#include <map>

namespace weightport {

std::vector<SourceReplicaGroup> SourceReplicaGroups(const Plan& plan) {
  std::map<std::pair<uint32_t, std::string>, SourceReplicaGroup> by_slice;
  for (const RankBuffer& b : plan.sources)
    for (size_t i = 0; i < b.shards.size(); ++i) {
      const PlannedShard& s = b.shards[i];
      SourceReplicaGroup& g = by_slice[{s.tensor, s.slice.ToString()}];
      g.tensor = s.tensor;
      g.tensor_name = plan.tensors[s.tensor].name;
      g.slice = s.slice;
      g.holders.emplace_back(b.endpoint, static_cast<uint32_t>(i));
    }
  std::vector<SourceReplicaGroup> out;
  for (auto& [key, g] : by_slice)
    if (g.holders.size() > 1) out.push_back(std::move(g));
  return out;
}

std::vector<uint32_t> ReplicatedShards(const std::vector<SourceReplicaGroup>& groups, Endpoint me) {
  std::vector<uint32_t> out;
  for (const SourceReplicaGroup& g : groups)
    for (const auto& [ep, shard] : g.holders)
      if (ep == me) out.push_back(shard);
  std::sort(out.begin(), out.end());
  return out;
}

std::string DescribeDivergence(const std::vector<SourceReplicaGroup>& groups,
                               const std::function<std::optional<uint64_t>(Endpoint, uint32_t)>& digest_of,
                               size_t limit) {
  std::string out;
  size_t diverged = 0;
  for (const SourceReplicaGroup& g : groups) {
    std::optional<std::pair<Endpoint, uint64_t>> first;
    std::optional<Endpoint> other;
    for (const auto& [ep, shard] : g.holders) {
      std::optional<uint64_t> d = digest_of(ep, shard);
      if (!d) continue;
      if (!first) {
        first.emplace(ep, *d);
      } else if (*d != first->second) {
        other = ep;
        break;
      }
    }
    if (!other) continue;
    if (++diverged > limit) continue;
    if (!out.empty()) out += "; ";
    out += "tensor '" + g.tensor_name + "' " + g.slice.ToString() + ": " + first->first.ToString() + " and " +
           other->ToString() + " hold different bytes";
  }
  if (diverged > limit) out += "; and " + std::to_string(diverged - limit) + " more";
  return out;
}

std::string MissingReplicas(const std::vector<SourceReplicaGroup>& groups, Endpoint lost, size_t shards,
                            const std::function<bool(Endpoint)>& live) {
  size_t covered = 0;
  for (const SourceReplicaGroup& g : groups) {
    size_t held = 0;
    bool other = false;
    for (const auto& [ep, shard] : g.holders) {
      if (ep == lost)
        ++held;
      else
        other = other || live(ep);
    }
    if (held == 0) continue;
    if (!other) return "tensor '" + g.tensor_name + "' " + g.slice.ToString() + " has no live replica";
    covered += held;
  }
  if (covered < shards)
    return std::to_string(shards - covered) + " of its " + std::to_string(shards) + " shards have no replica";
  return "";
}

}  // namespace weightport
