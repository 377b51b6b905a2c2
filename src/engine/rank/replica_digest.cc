// A source's digests of the shards other sources hold too (source_replicas.h), at each Publish.
#include <string>
#include <utility>
#include <vector>

#include "plan_rank_impl.h"
#include "weightport/engine/rank/source_replicas.h"

namespace weightport {
namespace plan_rank_internal {

void DigestReplicas(PlanRank::Impl& r) {
  r.replica_digests.clear();
  if (r.replicated.empty() || r.options.device_direct) return;
  struct Block {
    size_t shard;  // into r.replicated
    uint64_t at, bytes;
  };
  std::vector<Block> blocks;
  std::vector<size_t> first;  // per replicated shard, its first block
  for (size_t i = 0; i < r.replicated.size(); ++i) {
    first.push_back(blocks.size());
    const uint64_t bytes = r.c->buffer->shards.at(r.replicated[i]).bytes;
    for (uint64_t at = 0; at < bytes || (at == 0 && bytes == 0); at += kReplicaBlockBytes)
      blocks.push_back({i, at, std::min(kReplicaBlockBytes, bytes - at)});
  }
  first.push_back(blocks.size());
  std::vector<uint64_t> hashes(blocks.size());
  struct NoScratch {};
  ForEachIndex<NoScratch>(r.workers.get(), blocks.size(), [&](size_t b, NoScratch&) {
    const PlannedShard& s = r.c->buffer->shards[r.replicated[blocks[b].shard]];
    hashes[b] = Xxh3(r.at(s.offset + blocks[b].at), blocks[b].bytes);
  });
  for (size_t i = 0; i < r.replicated.size(); ++i)
    r.replica_digests.emplace_back(r.replicated[i],
                                   Xxh3(hashes.data() + first[i], (first[i + 1] - first[i]) * 8));
}

}  // namespace plan_rank_internal
}  // namespace weightport
