// Refill: a source started in place of a lost one fills its shards from the sources that hold the
// same slices (source_replicas.h) with one-sided Gets, 4 MiB blocks dealt round-robin over the
// holders so that each holder's link carries its share, a bounded window of them in flight.
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "plan_rank_impl.h"
#include "weightport/engine/rank/source_replicas.h"

namespace weightport {
namespace {

using plan_rank_internal::DigestReplicas;

struct RefillBlock {
  uint32_t shard;       // mine
  Endpoint from;        // the holder it is read from
  uint64_t local = 0;   // offset in my arena
  uint64_t remote = 0;  // offset in the holder's arena
  uint64_t bytes = 0;
};

// The Gets of one refill, on the loop thread; shared with their completions.
struct RefillRun : std::enable_shared_from_this<RefillRun> {
  MemoryRegion* arena = nullptr;
  std::map<Endpoint, std::shared_ptr<Connection>> connections;
  std::map<Endpoint, RemoteKey> keys;
  std::vector<RefillBlock> blocks;
  size_t window = 8;
  size_t next = 0, in_flight = 0, done = 0;
  Status failure;
  bool finished = false;
  std::promise<Status> result;

  void Issue() {
    while (failure.ok() && in_flight < window && next < blocks.size()) {
      const RefillBlock& b = blocks[next++];
      ++in_flight;
      auto self = shared_from_this();
      connections.at(b.from)->Get(*arena, b.local, keys.at(b.from), b.remote, b.bytes,
                                  [self, i = next - 1](const Status& s) { self->Done(i, s); });
    }
    Finish();
  }
  void Done(size_t i, const Status& s) {
    --in_flight;
    ++done;
    if (!s.ok() && failure.ok())
      failure = s.WithContext("refilling shard " + std::to_string(blocks[i].shard) + " from " +
                              blocks[i].from.ToString());
    Issue();
  }
  void Finish() {
    if (finished || in_flight > 0 || (failure.ok() && done < blocks.size())) return;
    finished = true;
    result.set_value(failure);
  }
};

}  // namespace

Result<RefillStats> PlanRank::Refill(const std::map<Endpoint, PlanPeer>& peers) {
  Impl& r = *impl_;
  const std::string me = r.c->me.ToString();
  if (!r.is_source()) return FailedPrecondition(me + ": only a source refills its shards");
  if (r.c->plan_digest)
    return FailedPrecondition(me +
                              ": a refill needs the whole plan (a part does not name the other holders)");
  if (r.options.device) return FailedPrecondition(me + ": a refill into a device's shards is not built");
  const auto t0 = std::chrono::steady_clock::now();
  RefillStats stats;
  auto run = std::make_shared<RefillRun>();
  run->arena = r.arena.get();
  size_t dealt = 0;  // blocks dealt so far, over every shard: the holders take turns
  for (const SourceReplicaGroup& g : SourceReplicaGroups(*r.c->plan)) {
    std::optional<uint32_t> mine;
    std::vector<std::pair<Endpoint, uint32_t>> holders;
    for (const auto& [ep, shard] : g.holders) {
      if (ep == r.c->me)
        mine = shard;
      else if (peers.count(ep))
        holders.emplace_back(ep, shard);
    }
    if (!mine) continue;
    if (holders.empty())
      return Unavailable(me + ": no other source in the table holds tensor '" + g.tensor_name + "' " +
                         g.slice.ToString() + ": nothing to refill it from");
    const PlannedShard& s = r.c->buffer->shards.at(*mine);
    for (uint64_t at = 0; at < s.bytes; at += kReplicaBlockBytes) {
      const auto& [from, theirs] = holders[dealt++ % holders.size()];
      const uint64_t bytes = std::min(kReplicaBlockBytes, s.bytes - at);
      const uint64_t remote =
          r.c->layouts.at(from).CopyOffset(0) + r.c->plan->Buffer(from)->shards.at(theirs).offset;
      run->blocks.push_back({*mine, from, s.offset + at, remote + at, bytes});
      stats.bytes_from[from] += bytes;
      stats.bytes += bytes;
    }
    ++stats.shards;
  }
  stats.not_refilled = r.c->buffer->shards.size() - stats.shards;
  // Closes the connections and lets them go on the loop's thread: a connection unregisters itself
  // from its transport as it is destroyed, which only that thread may do. Closing cancels what is
  // still in flight.
  auto release = [&] {
    r.loop->Call([run](Transport&) {
      for (auto& [ep, conn] : run->connections) conn->Close();
      run->connections.clear();
    });
  };
  for (const auto& entry : stats.bytes_from) {
    const Endpoint from = entry.first;  // a lambda may not name a structured binding (C++17 rules)
    const PlanPeer& peer = peers.at(from);
    auto conn = r.loop->Call([&](Transport& t) { return t.Connect(peer.address, from.ToString()); });
    if (!conn.ok()) {
      release();
      return conn.status().WithContext(me + ": connecting to " + from.ToString() + " to refill");
    }
    run->connections[from] = std::move(*conn);
    run->keys[from] = peer.key;
  }
  std::future<Status> finished = run->result.get_future();
  r.loop->Post([run](Transport&) { run->Issue(); });
  if (finished.wait_for(r.options.timeout) != std::future_status::ready) {
    release();
    return Timeout(me + ": refill not done within " + std::to_string(r.options.timeout.count()) + " ms");
  }
  Status got = finished.get();
  release();
  WP_RETURN_IF_ERROR(got);
  DigestReplicas(r);
  stats.digests = r.replica_digests;
  stats.elapsed = std::chrono::steady_clock::now() - t0;
  return stats;
}

}  // namespace weightport
