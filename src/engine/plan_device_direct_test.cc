// PlanRankOptions::device_direct, host memory standing in for the device: a destination's chunks
// that land in a shard as sent are written by the transport into the device copy and verified
// there; what a rank converts, quantises or relays still goes through the arena.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "engine/plan_rank_test_util.h"
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
  const Endpoint dst = g.plan->destinations.at(0).endpoint;
  auto made = MakeFakeTransport(g.fabric, "dst-after-rekey");
  ASSERT_TRUE(made.ok());
  auto faulty = MakeFaultInjectingTransport(*std::move(made), g.faults);
  ASSERT_TRUE(faulty.ok());
  auto fresh = std::make_unique<ProgressLoop>(*std::move(faulty));
  ASSERT_TRUE(g.ranks.at(dst)->Rekey(*fresh).ok());
  g.loops.at(dst)->Stop();
  g.loops[dst] = std::move(fresh);
  g.table[dst] = g.ranks.at(dst)->peer_info();
  for (auto& [ep, rank] : g.ranks) ASSERT_TRUE(rank->Connect(g.table).ok()) << ep.ToString();
  const ReceiveStats s = g.Update(2);
  g.ExpectLive(2);
  EXPECT_EQ(s.device_direct_bytes, s.bytes);
  EXPECT_GT(s.bytes, 0u);
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
  // Staged through the host, the same device is fine; and a source ignores device_direct.
  o.device_direct = false;
  EXPECT_TRUE(PlanRank::Create(plan, dst, loop, o).ok());
  o.device_direct = true;
  EXPECT_TRUE(PlanRank::Create(plan, plan->sources.at(0).endpoint, loop, o).ok());
  o.device = nullptr;
  EXPECT_EQ(PlanRank::Create(plan, dst, loop, o).status().code(), StatusCode::kInvalidArgument);
  loop.Stop();
}

}  // namespace
}  // namespace weightport
