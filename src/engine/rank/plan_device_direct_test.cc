// PlanRankOptions::device_direct, host memory standing in for the device: a destination's chunks
// that land in a shard as sent are written by the transport into the device copy and verified
// there; what a rank converts, quantises or relays still goes through the arena.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <tuple>

#include "engine/testing/plan_rank_test_util.h"
#include "plan_rank_impl.h"
#include "weightport/core/device_memory.h"

namespace weightport {
namespace {

using namespace plan_rank_test;

PlanRankOptions Direct() {
  PlanRankOptions o;
  o.device = HostStandInMemory();
  o.device_direct = true;
  return o;
}

uint64_t ShardBytes(const RankBuffer& b) {
  uint64_t n = 0;
  for (const PlannedShard& s : b.shards) n += s.bytes;
  return n;
}

bool AllZero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

// TP 2 to TP 1, no relays, no conversion: every byte lands on the device by the transport, nothing
// is copied there, and the arena's shards stay as they were made (zero) in both copies.
TEST(PlanRankDeviceDirect, EveryChunkLandsOnTheDeviceAndTheArenaIsNotWritten) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 1), 0), Direct());
  const RankBuffer& dst = g.plan->destinations.at(0);
  for (uint64_t v = 1; v <= 2; ++v) {
    const ReceiveStats s = g.Update(v);
    g.ExpectLive(v);  // the device's live copy holds v
    EXPECT_EQ(s.device_direct_bytes, ShardBytes(dst)) << "version " << v;
    EXPECT_EQ(s.device_direct_bytes, s.bytes);
    EXPECT_EQ(s.device_bytes, 0u) << "nothing is copied to the device: it is there";
    EXPECT_EQ(s.source_device_bytes, s.bytes) << "and it was read from the sources' devices";
    PlanRank& r = *g.ranks.at(dst.endpoint);
    for (size_t i = 0; i < r.num_shards(); ++i)
      EXPECT_TRUE(AllZero(r.shard_bytes(i))) << "the arena's shard " << i << " was written";
  }
}

// FSDP flat sources to TP replicas through relays, e4m3 quantised at the receivers: the chunks a
// rank relays or quantises go the staged way, the others direct, and every copy is right.
TEST(PlanRankDeviceDirect, RelayedAndQuantisedChunksGoTheStagedWayTheOthersDirect) {
  Group g(MustPlan(FsdpFlat(BlockModel(DType::kBF16), 3), BuildMesh(BlockModel(DType::kBF16), TpReplicas()),
                   1, 1024, {{"*_proj.weight", DType::kF8E4M3}}),
          Direct());
  for (uint64_t v = 1; v <= 3; ++v) {
    const ReceiveStats s = g.Update(v);
    g.ExpectLive(v);
    EXPECT_GT(s.device_direct_bytes, 0u) << "version " << v;
    EXPECT_GT(s.device_bytes, 0u) << "version " << v << ": relayed and quantised bytes are copied";
    EXPECT_LT(s.device_direct_bytes, s.bytes);
  }
}

// A Get corrupted on its way into the device copy is caught by the hash taken there and fetched
// again; every version is exact.
TEST(PlanRankDeviceDirect, ACorruptChunkOnTheDeviceIsFetchedAgain) {
  Group g(MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(2, 2), 0), Direct());
  g.Update(1);
  uint64_t refetched = 0;
  for (uint64_t v = 2; v <= 11 && refetched == 0; ++v) {
    g.faults->set_corrupt(FaultTrigger{.nth = 40, .ops = kFaultGet});
    refetched += g.Update(v).corrupt_refetched;
    g.ExpectLive(v);
  }
  EXPECT_GE(g.faults->stats().corrupted, 1u);
  EXPECT_GE(refetched, 1u);
}

// Delta: the chunks of tensors that did not change are copied on the device from its live copy,
// the rest fetched straight there; the host is not involved either way.
TEST(PlanRankDeviceDirect, DeltaKeepsOnTheDeviceWhatDidNotChange) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(2, 2), 0), Direct());
  g.content = [](uint32_t t, uint64_t v) { return t % 2 == 0 ? uint64_t{1} : v; };  // even tensors stay
  const ReceiveStats first = g.Update(1);
  g.ExpectLive(1);
  for (uint64_t v = 2; v <= 3; ++v) {
    const ReceiveStats s = g.Update(v);
    g.ExpectLive(v);
    EXPECT_GT(s.kept_bytes, 0u);
    EXPECT_EQ(s.device_kept_bytes, s.kept_bytes) << "kept chunks are copied on the device";
    EXPECT_EQ(s.device_bytes, s.device_kept_bytes) << "nothing crosses from the host";
    EXPECT_EQ(s.device_direct_bytes + s.kept_bytes, first.device_direct_bytes);
  }
}

// Relay chains (each rank relays some tensors, stores the rest as sent): with a relay gone, the
// ranks below it fetch its steps from upstream or the sources, and what they store as sent still
// lands straight on the device.
TEST(PlanRankDeviceDirect, ChunksFetchedAroundALostRelayLandOnTheDeviceToo) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(3, 2), 1), Direct());
  // The rank that takes the most bytes straight to its device, and a relay it reads from.
  int leaf = -1;
  uint64_t most = 0;
  g.Publish(1);
  for (auto& [rank, result] : g.Receive(1)) {
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    if (result->device_direct_bytes > most)
      std::tie(leaf, most) = std::pair(rank, result->device_direct_bytes);
  }
  for (const RankBuffer& b : g.plan->destinations) ASSERT_TRUE(g.ranks.at(b.endpoint)->Commit(1).ok());
  ASSERT_GE(leaf, 0);
  const Endpoint leaf_ep{PlanSide::kDestination, leaf};
  std::optional<Endpoint> gone;
  for (const Endpoint& ep : g.ranks.at(leaf_ep)->peers_needed())
    if (ep.side == PlanSide::kDestination) gone = ep;
  ASSERT_TRUE(gone.has_value()) << "dst rank " << leaf << " reads from no relay";
  g.Remove(*gone);
  for (auto& [ep, rank] : g.ranks) {
    std::vector<Endpoint> unreachable;
    ASSERT_TRUE(rank->Connect(g.table, &unreachable).ok()) << ep.ToString();
  }
  g.Publish(2);
  for (auto& [rank, result] : g.Receive(2)) {
    ASSERT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
    if (rank == leaf) {
      EXPECT_GT(result->rerouted_steps, 0u);
      EXPECT_EQ(result->device_direct_bytes, most) << "what went direct before goes direct around the relay";
    }
    const Endpoint ep{PlanSide::kDestination, rank};
    ASSERT_TRUE(g.ranks.at(ep)->Commit(2).ok());
    g.ExpectRankLive(*g.plan->Buffer(ep), 2);
  }
}

// Rekey registers the device copies with the fresh transport too: the next version lands there.
TEST(PlanRankDeviceDirect, AfterARekeyChunksLandOnTheDeviceThroughTheFreshTransport) {
  PlanRankOptions o = Direct();
  o.rotate_keys = true;
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 1), 0), o);
  g.Update(1);
  ASSERT_NO_FATAL_FAILURE(g.Rekey(g.plan->destinations.at(0).endpoint, "dst-after-rekey"));
  const ReceiveStats s = g.Update(2);
  g.ExpectLive(2);
  EXPECT_EQ(s.device_direct_bytes, s.bytes);
  EXPECT_GT(s.bytes, 0u);
}

// --- Sources publishing on their devices (device_direct at a source) ---

// Bytes of the steps the sources send: what destinations read from the sources.
uint64_t SentBySources(const Plan& plan, const std::function<bool(const PlanStep&)>& which) {
  uint64_t n = 0;
  for (const PlanStep& s : plan.steps)
    if (s.from.side == PlanSide::kSource && which(s)) n += s.bytes;
  return n;
}

// Destinations on the host only, reading from sources that publish on their devices through a
// relay chain: every byte the sources send is read from their published device copies, each
// version's changed bytes are copied on the device there, and none crosses to a source's host.
TEST(PlanRankSourceDirect, DestinationsReadTheSourcesDeviceCopiesAndNothingCrossesToTheirHosts) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(2, 2), 1), PlanRankOptions{}, Direct());
  g.content = [](uint32_t t, uint64_t v) { return t % 2 == 0 ? uint64_t{1} : v; };  // even tensors stay
  for (uint64_t v = 1; v <= 3; ++v) {
    const ReceiveStats s = g.Update(v);
    g.ExpectLive(v);
    const auto changed = [&](const PlanStep& step) { return v == 1 || step.tensor % 2 == 1; };
    EXPECT_EQ(s.source_device_bytes, SentBySources(*g.plan, changed)) << "version " << v;
    for (const RankBuffer& b : g.plan->sources) {
      PlanRank& r = *g.ranks.at(b.endpoint);
      uint64_t changed_bytes = 0;  // each shard is within one 1 MiB block
      for (const PlannedShard& shard : b.shards)
        changed_bytes += v == 1 || shard.tensor % 2 == 1 ? shard.bytes : 0;
      EXPECT_EQ(r.published_on_device(), changed_bytes) << b.endpoint.ToString() << " version " << v;
      EXPECT_EQ(r.published_from_device(), 0u) << b.endpoint.ToString() << ": nothing converts there";
      for (size_t i = 0; i < r.num_shards(); ++i)
        EXPECT_TRUE(AllZero(r.shard_bytes(i)))
            << b.endpoint.ToString() << " shard " << i << " reached the host";
    }
  }
}

// The published copy is the source's own: the trainer may write its copy again as soon as Publish
// returns, and the version published is what arrives.
TEST(PlanRankSourceDirect, TheTrainerWritesItsCopyAgainRightAfterPublish) {
  Group g(MustPlan(FsdpFlat(Model(), 3), ReplicasOfTp(2, 2), 1), Direct());
  g.Update(1);
  g.Publish(2);
  for (const RankBuffer& b : g.plan->sources)
    for (size_t i = 0; i < b.shards.size(); ++i) {  // the trainer's next step, while v2 travels
      const std::vector<std::byte> next(b.shards[i].bytes, std::byte{0x5a});
      ASSERT_TRUE(g.source_device->ToDevice(next, g.ranks.at(b.endpoint)->device_shard(i)).ok());
    }
  for (auto& [rank, result] : g.Receive(2)) ASSERT_TRUE(result.ok()) << result.status().ToString();
  for (const RankBuffer& b : g.plan->destinations) ASSERT_TRUE(g.ranks.at(b.endpoint)->Commit(2).ok());
  g.ExpectLive(2);
}

// What a source converts or quantises is read from its arena, so those shards still cross to its
// host; the others are read from its device.
TEST(PlanRankSourceDirect, ShardsTheSourceConvertsOrQuantisesStillCrossToItsHost) {
  const std::vector<int> one = {0};
  for (int at_source = 0; at_source < 2; ++at_source) {
    SCOPED_TRACE(at_source == 0 ? "f32 -> bf16" : "bf16 -> e4m3 blocks");
    Group g(at_source == 0 ? MustPlan(TensorParallel(Model(DType::kF32), 2), ReplicasOfTp(1, 1, DType::kF32),
                                      0, 1024, {{"*_proj.weight", DType::kBF16}})
                           : MustPlan(Replicated(BlockModel(DType::kBF16), one),
                                      BuildMesh(BlockModel(DType::kBF16), TpReplicas()), 1, 1024,
                                      {{"*_proj.weight", DType::kF8E4M3}}),
            PlanRankOptions{}, Direct());
    const auto converted = [&](uint32_t t) {
      return g.plan->destination_dtypes[t] != g.plan->tensors[t].dtype;
    };
    for (uint64_t v = 1; v <= 2; ++v) {
      const ReceiveStats s = g.Update(v);
      g.ExpectLive(v);
      EXPECT_EQ(s.source_device_bytes,
                SentBySources(*g.plan, [&](const PlanStep& p) { return !converted(p.tensor); }));
      EXPECT_GT(s.source_device_bytes, 0u);
      EXPECT_LT(s.source_device_bytes, s.bytes);
      for (const RankBuffer& b : g.plan->sources) {
        uint64_t host = 0, all = 0;
        for (const PlannedShard& shard : b.shards) {
          all += shard.bytes;
          host += converted(shard.tensor) ? shard.bytes : 0;
        }
        ASSERT_GT(host, 0u);
        EXPECT_EQ(g.ranks.at(b.endpoint)->published_from_device(), host) << b.endpoint.ToString();
        EXPECT_EQ(g.ranks.at(b.endpoint)->published_on_device(), all) << b.endpoint.ToString();
      }
    }
  }
}

// Steps compressed on slow links: chunks that shrink travel as frames made from the source's arena
// (so their shards cross to its host), those that do not are read as they are from its device.
TEST(PlanRankSourceDirect, CompressedStepsTakeFramesFromTheHostAndTheRestFromTheDevice) {
  Group g(SlowLinkPlan(), PlanRankOptions{}, Direct());
  const auto any = [](const PlanStep&) { return true; };
  ASSERT_EQ(SentBySources(*g.plan, [](const PlanStep& p) { return p.compress; }), SentBySources(*g.plan, any))
      << "every source step is compressed";
  g.bytes = CompressibleBytes;
  const ReceiveStats first = g.Update(1);
  g.ExpectLive(1);
  EXPECT_GT(first.frames, 0u);
  EXPECT_LT(first.source_device_bytes * 2, SentBySources(*g.plan, any)) << "most chunks shrank: frames";
  for (const RankBuffer& b : g.plan->sources)
    EXPECT_GT(g.ranks.at(b.endpoint)->published_from_device(), 0u) << b.endpoint.ToString();
  g.bytes = plan_rank_test::TensorBytes;  // random: no chunk shrinks, each is read as it is
  const ReceiveStats second = g.Update(2);
  g.ExpectLive(2);
  EXPECT_EQ(second.frames, 0u);
  EXPECT_EQ(second.source_device_bytes, SentBySources(*g.plan, any));
}

// A ChunkHashes call on a step's chunks, not Publish's change detection over 1 MiB blocks.
bool OfAStep(uint64_t chunk) { return chunk < plan_rank_internal::kDeviceBlockBytes; }

// Counts the calls that hash chunks on the device: one per chunk (HashConcatenated), or one per
// step's run of chunks (ChunkHashes with the plan's chunk size; 1 MiB blocks are Publish's change
// detection).
class HashCountingDevice final : public StandInDevice {
 public:
  std::string name() const override { return "counting device"; }
  Result<uint64_t> HashConcatenated(std::span<const DeviceBytes> parts) override {
    ++single;
    return StandInDevice::HashConcatenated(parts);
  }
  Result<std::vector<uint64_t>> ChunkHashes(const void* device, size_t bytes, uint64_t chunk) override {
    if (OfAStep(chunk)) {
      ++batched;
      chunks += (bytes + chunk - 1) / chunk;
    }
    return StandInDevice::ChunkHashes(device, bytes, chunk);
  }
  std::atomic<uint64_t> single{0}, batched{0}, chunks{0};
};

// TP-2 to whole replicas: each step's piece is a whole source shard, contiguous on the device, so its
// chunks are hashed in one call (a GPU: one kernel) rather than one each, and every byte still
// arrives as published.
TEST(PlanRankSourceDirect, AStepsChunksOneAfterAnotherOnTheDeviceAreHashedInOneCall) {
  auto device = std::make_shared<HashCountingDevice>();
  PlanRankOptions o;
  o.device = device;
  o.device_direct = true;
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(2, 1), 0), PlanRankOptions{}, o);
  uint64_t chunks = 0, steps = 0;
  for (const PlanStep& s : g.plan->steps) {
    chunks += s.chunks;
    steps += s.chunks > 0;
  }
  ASSERT_GT(chunks, 2 * steps) << "steps of several chunks";
  for (uint64_t v = 1; v <= 2; ++v) {
    device->single = device->batched = device->chunks = 0;
    g.Update(v);
    g.ExpectLive(v);
    EXPECT_EQ(device->chunks + device->single, chunks) << "every chunk hashed once, version " << v;
    EXPECT_GT(device->chunks, device->batched) << "several chunks per call";
    EXPECT_LE(device->batched + device->single, steps);
  }
}

// A source moved to a fresh transport registers its published copy there: peers get its new key
// with its new address and read the next version from it.
TEST(PlanRankSourceDirect, AfterARekeyPeersReadTheSourcesDeviceThroughTheFreshTransport) {
  PlanRankOptions o = Direct();
  o.rotate_keys = true;
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 1), 0), PlanRankOptions{}, o);
  g.Update(1);
  const Endpoint src = g.plan->sources.at(0).endpoint;
  const PlanPeer before = g.table.at(src);
  ASSERT_NO_FATAL_FAILURE(g.Rekey(src, "src-after-rekey"));
  ASSERT_TRUE(g.table[src].device_key.has_value());
  EXPECT_NE(g.table[src].device_key->packed, before.device_key->packed);
  const ReceiveStats s = g.Update(2);
  g.ExpectLive(2);
  EXPECT_EQ(s.source_device_bytes, SentBySources(*g.plan, [](const PlanStep&) { return true; }));
}

// A key to a published copy smaller than the plan lays out is refused at Connect, naming the source.
TEST(PlanRankSourceDirect, ConnectRefusesADeviceKeyTooSmallForThePlan) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 1), 0), PlanRankOptions{}, Direct());
  const Endpoint src = g.plan->sources.at(1).endpoint;
  std::map<Endpoint, PlanPeer> table = g.table;
  ASSERT_TRUE(table.at(src).device_key.has_value());
  table.at(src).device_key->length = 64;
  const Status s = g.ranks.at(g.plan->destinations.at(0).endpoint)->Connect(table);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(src.ToString()), std::string::npos) << s.message();
}

// A source publishing on a device whose memory this destination's transport cannot read (a GPU's,
// to a UCX without CUDA) is refused at Connect, naming both and what to do, before any version.
TEST(PlanRankSourceDirect, ConnectRefusesASourceDeviceItsTransportCannotRead) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 1), 0), PlanRankOptions{}, Direct());
  const Endpoint src = g.plan->sources.at(0).endpoint, dst = g.plan->destinations.at(0).endpoint;
  EXPECT_EQ(g.table.at(src).device_memory, "host");
  std::map<Endpoint, PlanPeer> table = g.table;
  table.at(src).device_memory = "cuda";
  const Status s = g.ranks.at(dst)->Connect(table);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  for (const std::string& named :
       {dst.ToString(), src.ToString(), std::string("cuda memory"), std::string("without device_direct")})
    EXPECT_NE(s.message().find(named), std::string::npos) << s.message() << " does not name " << named;
  ASSERT_TRUE(g.ranks.at(dst)->Connect(g.table).ok());  // the true table still works
  g.Update(1);
  g.ExpectLive(1);
}

// A device that cannot hash the published copy fails Publish, naming the rank, tensor and device;
// the version is not published.
class HashFailingDevice final : public StandInDevice {
 public:
  std::string name() const override { return "failing device"; }
  Result<uint64_t> HashConcatenated(std::span<const DeviceBytes>) override {
    return IoError("the kernel failed");
  }
  Result<std::vector<uint64_t>> ChunkHashes(const void* device, size_t bytes, uint64_t chunk) override {
    if (OfAStep(chunk)) return IoError("the kernel failed");
    return StandInDevice::ChunkHashes(device, bytes, chunk);
  }
};

TEST(PlanRankSourceDirect, PublishFailsNamingTheChunkWhenTheDeviceCannotHashIt) {
  PlanRankOptions o;
  o.device = std::make_shared<HashFailingDevice>();
  o.device_direct = true;
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 1), 0), PlanRankOptions{}, o);
  const Endpoint src = g.plan->sources.at(0).endpoint;
  const Status s = g.ranks.at(src)->Publish(1);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  for (const std::string& named : {src.ToString(), std::string("tensor '"), std::string("failing device"),
                                   std::string("the kernel failed")})
    EXPECT_NE(s.message().find(named), std::string::npos) << s.message() << " does not name " << named;
}

// Device memory standing in for a GPU's: a transport that moves host memory only cannot take it,
// and Create says so, naming the rank, the transport and the device.
class CudaLikeDevice final : public StandInDevice {
 public:
  std::string name() const override { return "cuda-like device"; }
  std::string memory_type() const override { return "cuda"; }
};

TEST(PlanRankDeviceDirect, ATransportThatCannotTakeTheDeviceMemoryIsRefusedByName) {
  auto plan = std::make_shared<const Plan>(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 1), 0));
  auto transport = MakeFakeTransport(std::make_shared<FakeFabric>(), "dst");
  ASSERT_TRUE(transport.ok());
  ProgressLoop loop(*std::move(transport));
  const Endpoint dst = plan->destinations.at(0).endpoint;
  PlanRankOptions o;
  o.device = std::make_shared<CudaLikeDevice>();
  o.device_direct = true;
  auto refused = PlanRank::Create(plan, dst, loop, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  for (const std::string& named :
       {dst.ToString(), std::string("'dst'"), std::string("cuda memory"), std::string("cuda-like device")})
    EXPECT_NE(refused.status().message().find(named), std::string::npos)
        << refused.status().message() << " does not name " << named;
  // A source that would publish there is refused the same way; staged through the host, the same
  // device is fine on both sides.
  const Endpoint src = plan->sources.at(0).endpoint;
  auto source = PlanRank::Create(plan, src, loop, o);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(source.status().message().find(src.ToString()), std::string::npos) << source.status().message();
  o.device_direct = false;
  EXPECT_TRUE(PlanRank::Create(plan, dst, loop, o).ok());
  EXPECT_TRUE(PlanRank::Create(plan, src, loop, o).ok());
  o.device_direct = true;
  o.device = nullptr;
  EXPECT_EQ(PlanRank::Create(plan, dst, loop, o).status().code(), StatusCode::kInvalidArgument);
  loop.Stop();
}

}  // namespace
}  // namespace weightport
