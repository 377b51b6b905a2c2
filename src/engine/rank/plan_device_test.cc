// PlanRank with its shards on a device (PlanRankOptions::device), host memory standing in for the
// device: sources publish what the trainer wrote there, destinations' device copies follow their
// live copies and do not change before Commit. (cuda_tests runs the same with a GPU.)
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "engine/testing/plan_rank_test_util.h"
#include "weightport/core/device_memory.h"

// A namespace of its own: the unity build compiles this file together with other tests.
namespace weightport::plan_device_test {
namespace {

using namespace plan_rank_test;

PlanRankOptions OnDevice() {
  PlanRankOptions o;
  o.device = HostStandInMemory();
  return o;
}

// FSDP flat sources to TP replicas through relays, some tensors quantised at the receivers: the
// trainer writes only the device shards, so what arrives came through Publish's copy.
TEST(PlanRankDevice, SourcesPublishTheirDeviceShardsAndDestinationsGetThemOnTheirs) {
  Group g(MustPlan(FsdpFlat(BlockModel(DType::kBF16), 3), BuildMesh(BlockModel(DType::kBF16), TpReplicas()),
                   1, 1024, {{"*_proj.weight", DType::kF8E4M3}}),
          OnDevice());
  for (const auto& [ep, rank] : g.ranks)
    for (size_t i = 0; i < rank->num_shards(); ++i)
      ASSERT_NE(rank->device_shard(i), nullptr) << ep.ToString();
  for (uint64_t v = 1; v <= 3; ++v) {
    g.Update(v);
    g.ExpectLive(v);  // host and device live copies both hold v
  }
}

// Between Receive and Commit the device's live copy still holds the old version; Commit swaps it.
TEST(PlanRankDevice, TheDeviceLiveCopyChangesOnlyOnCommit) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(2, 2), 0), OnDevice());
  g.Update(1);
  g.Publish(2);
  for (auto& [rank, result] : g.Receive(2)) ASSERT_TRUE(result.ok()) << result.status().ToString();
  g.ExpectLive(1);
  for (const RankBuffer& b : g.plan->destinations) {
    PlanRank& r = *g.ranks.at(b.endpoint);
    const void* before = r.device_shard(0);
    ASSERT_TRUE(r.Commit(2).ok());
    EXPECT_NE(r.device_shard(0), before) << "Commit did not make the other device copy live";
  }
  g.ExpectLive(2);
}

// Counts what is copied to the device, and how many operations the destination's transport had
// issued at each copy.
class RecordingDevice final : public StandInDevice {
 public:
  explicit RecordingDevice(std::shared_ptr<FaultPlan> faults) : faults_(std::move(faults)) {}
  std::string name() const override { return "recording device"; }
  Status ToDevice(std::span<const std::byte> host, void* device) override {
    std::lock_guard<std::mutex> lock(mu_);
    ops_at_copy.push_back(faults_->stats().ops);
    bytes += host.size();
    return StandInDevice::ToDevice(host, device);
  }
  std::vector<uint64_t> ops_at_copy;
  uint64_t bytes = 0;

 private:
  std::mutex mu_;
  std::shared_ptr<FaultPlan> faults_;
};

uint64_t ShardBytes(const RankBuffer& b) {
  uint64_t n = 0;
  for (const PlannedShard& s : b.shards) n += s.bytes;
  return n;
}

// One chunk in flight at a time, each Get 20 ms: the destination's first chunk is on the device
// while the others are still to be fetched, and every shard byte goes to the device exactly once.
TEST(PlanRankDevice, VerifiedChunksGoToTheDeviceWhileLaterOnesAreStillOnTheWire) {
  PlanRankOptions o;
  o.window = 1;
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 1), 0, 8192), o);
  auto device = std::make_shared<RecordingDevice>(g.faults);
  o.device = device;
  g.ranks.clear();  // again, on the recording device
  for (auto& [ep, loop] : g.loops) {
    auto rank = PlanRank::Create(g.plan, ep, *loop, o);
    ASSERT_TRUE(rank.ok()) << rank.status().ToString();
    g.table[ep] = (*rank)->peer_info();
    g.ranks[ep] = *std::move(rank);
  }
  for (auto& [ep, r] : g.ranks) ASSERT_TRUE(r->Connect(g.table).ok()) << ep.ToString();
  g.device = g.source_device = HostStandInMemory();  // the trainer's writes are not counted (same memory)
  g.faults->set_delay({0, 1.0, kFaultGet}, std::chrono::milliseconds(20));
  g.Publish(1);
  const RankBuffer& dst = g.plan->destinations.at(0);
  auto results = g.Receive(1);
  ASSERT_TRUE(results.at(0).ok()) << results.at(0).status().ToString();
  const ReceiveStats& stats = *results.at(0);
  ASSERT_GE(stats.chunks, 8u);
  const uint64_t ops = g.faults->stats().ops;
  ASSERT_FALSE(device->ops_at_copy.empty());
  EXPECT_LT(device->ops_at_copy.front(), ops)
      << "nothing went to the device before the last chunk was fetched";
  EXPECT_GT(device->ops_at_copy.size(), dst.shards.size()) << "shards copied whole, not chunk by chunk";
  EXPECT_EQ(device->bytes, ShardBytes(dst));
  EXPECT_EQ(stats.device_bytes, ShardBytes(dst));
  EXPECT_GT(stats.device_copy.count(), 0);
  ASSERT_TRUE(g.ranks.at(dst.endpoint)->Commit(1).ok());
  g.ExpectLive(1);
}

// Delta and e4m3 at the receivers on a device: kept chunks and reused bands reach the device's
// copy (from its live copy, on the device) as well as fetched chunks and bands quantised again (from
// the host), each shard byte once per version.
TEST(PlanRankDevice, KeptChunksAndQuantisedBandsReachTheDeviceToo) {
  Group g(MustPlan(FsdpFlat(BlockModel(DType::kBF16), 3), BuildMesh(BlockModel(DType::kBF16), TpReplicas()),
                   1, 1024, {{"*_proj.weight", DType::kF8E4M3}}),
          OnDevice());
  g.content = [](uint32_t t, uint64_t v) { return t % 2 == 0 ? uint64_t{1} : v; };  // even tensors stay
  uint64_t total = 0;
  for (const RankBuffer& b : g.plan->destinations) total += ShardBytes(b);
  for (uint64_t v = 1; v <= 3; ++v) {
    const ReceiveStats s = g.Update(v);  // every destination's, summed
    EXPECT_EQ(s.device_bytes, total) << "version " << v;
    EXPECT_GT(s.bands_quantized, 0u);
    if (v > 1) {
      EXPECT_GT(s.kept_chunks, 0u) << "version " << v;
      EXPECT_GT(s.bands_reused, 0u) << "version " << v;
      EXPECT_GT(s.device_kept_bytes, 0u) << "version " << v << ": nothing kept was copied on the device";
      EXPECT_LT(s.device_kept_bytes, total)
          << "version " << v << ": the changed tensors came from the live copy";
    } else {
      EXPECT_EQ(s.device_kept_bytes, 0u);
    }
    g.ExpectLive(v);
  }
}

// A source copies from its device only the 1 MiB blocks that changed since its last Publish: all of
// them at first, then those of the tensors that change; what arrives is right either way.
TEST(PlanRankDevice, ASourceCopiesOnlyTheBlocksThatChangedFromItsDevice) {
  const std::vector<TensorMeta> model = {
      *TensorMeta::Make("model.layers.0.mlp.up_proj.weight", DType::kBF16, {1024, 1024}),
      *TensorMeta::Make("model.layers.0.mlp.down_proj.weight", DType::kBF16, {1024, 1024}),
      *TensorMeta::Make("model.norm.weight", DType::kBF16, {1024})};
  const std::vector<MeshAxis> replicas = {ReplicaAxis("dp", 2)};
  Group g(MustPlan(FsdpFlat(model, 2), BuildMesh(model, replicas), 1, 1 << 20), OnDevice());
  g.content = [](uint32_t t, uint64_t v) { return t == 1 ? uint64_t{1} : v; };  // down_proj stays
  uint64_t total = 0;
  for (const RankBuffer& b : g.plan->sources) total += ShardBytes(b);
  for (uint64_t v = 1; v <= 3; ++v) {
    g.Update(v);
    uint64_t copied = 0;
    for (const RankBuffer& b : g.plan->sources) copied += g.ranks.at(b.endpoint)->published_from_device();
    if (v == 1) {
      EXPECT_EQ(copied, total);
    } else {  // up_proj (2 MiB) and the norm's block; down_proj's blocks but those shared with them, not
      EXPECT_GT(copied, uint64_t{2} << 20) << "version " << v;
      EXPECT_LE(copied, total - (uint64_t{1} << 20)) << "version " << v;
    }
    g.ExpectLive(v);
  }
}

// A shard quantised here in more than one band (5 MiB of bf16 input), only its first block row
// changing after version 1: its bands quantised again come from the host, the others from the live
// device copy, and every device copy holds what the host does.
TEST(PlanRankDevice, AShardQuantisedInSeveralBandsReachesTheDevice) {
  const std::vector<TensorMeta> big = {
      *TensorMeta::Make("model.layers.0.mlp.up_proj.weight", DType::kBF16, {2048, 1280})};
  const std::vector<MeshAxis> replicas = {ReplicaAxis("dp", 2)};
  Group g(MustPlan(FsdpFlat(big, 3), BuildMesh(big, replicas), 1, 1 << 20, {{"*", DType::kF8E4M3}}),
          OnDevice());
  g.bytes = [](const TensorMeta& t, size_t index, uint64_t v) {
    std::vector<std::byte> out = plan_rank_test::TensorBytes(t, index, 1);
    const std::vector<std::byte> now = plan_rank_test::TensorBytes(t, index, v);
    std::copy_n(now.begin(), 128 * t.shape[1] * 2, out.begin());  // the first block row (bf16)
    return out;
  };
  uint64_t total = 0;
  for (const RankBuffer& b : g.plan->destinations) total += ShardBytes(b);
  for (uint64_t v = 1; v <= 3; ++v) {
    const ReceiveStats s = g.Update(v);
    EXPECT_EQ(s.device_bytes, total) << "version " << v;
    EXPECT_GE(s.bands_reused + s.bands_quantized, 4u)
        << "version " << v << ": fewer than 2 bands per destination";
    if (v > 1) {
      EXPECT_GT(s.bands_reused, 0u) << "version " << v;
      EXPECT_GT(s.device_kept_bytes, 0u) << "version " << v;
    }
    g.ExpectLive(v);
  }
}

// A device that fails a copy: Publish and Receive say which shard, which tensor, which device.
class FailingDevice final : public StandInDevice {
 public:
  std::string name() const override { return "flaky device"; }
  Status ToHost(const void* device, std::span<std::byte> host) override {
    if (fail_to_host || to_host_left == 0) return DataLoss("ECC error");
    if (to_host_left > 0) --to_host_left;
    return StandInDevice::ToHost(device, host);
  }
  Status ToDevice(std::span<const std::byte> host, void* device) override {
    return fail_to_device ? DataLoss("ECC error") : StandInDevice::ToDevice(host, device);
  }
  Status CopyOnDevice(const void* from, void* to, size_t bytes) override {
    return fail_to_device ? DataLoss("ECC error") : StandInDevice::CopyOnDevice(from, to, bytes);
  }
  bool fail_to_host = false, fail_to_device = false;
  int to_host_left = -1;  // copies from the device that succeed before they fail; -1: no limit
};

TEST(PlanRankDevice, AFailedCopyNamesTheShardAndTheDeviceAndLosesNothing) {
  auto device = std::make_shared<FailingDevice>();
  PlanRankOptions o;
  o.device = device;
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 2), 0), o);
  g.device = g.source_device =
      HostStandInMemory();  // the test's own writes and checks do not fail (same memory)
  g.Update(1);
  device->fail_to_host = true;
  static_cast<std::byte*>(g.ranks.at(g.plan->sources[0].endpoint)->device_shard(0))[0] ^= std::byte{1};
  const Status published = g.ranks.at(g.plan->sources[0].endpoint)->Publish(2);
  EXPECT_EQ(published.code(), StatusCode::kDataLoss);
  EXPECT_NE(published.message().find("reading src rank 0 shard 0 (tensor '"), std::string::npos)
      << published.message();
  EXPECT_NE(published.message().find("from flaky device"), std::string::npos) << published.message();
  device->fail_to_host = false;
  device->fail_to_device = true;
  g.Publish(2);
  for (auto& [rank, result] : g.Receive(2)) {
    EXPECT_EQ(result.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(result.status().message().find("to flaky device"), std::string::npos)
        << result.status().message();
  }
  for (const RankBuffer& b : g.plan->destinations)
    EXPECT_FALSE(g.ranks.at(b.endpoint)->Commit(2).ok()) << "a version whose device copy failed committed";
  g.ExpectLive(1);
  device->fail_to_device = false;
  g.Update(3);
  g.ExpectLive(3);
}

// A Publish whose copy from the device fails part way forgets what the arena holds of that shard:
// the next Publish copies it whole, even where the device went back to bytes hashed before.
TEST(PlanRankDevice, APublishThatFailsPartWayCopiesTheShardWholeNextTime) {
  auto device = std::make_shared<FailingDevice>();
  PlanRankOptions o;
  o.device = device;
  const std::vector<TensorMeta> big = {
      *TensorMeta::Make("model.layers.0.mlp.up_proj.weight", DType::kBF16, {2048, 1024})};  // 4 MiB
  const std::vector<int> one_source = {0};
  const std::vector<MeshAxis> one_replica = {ReplicaAxis("dp", 1)};
  Group g(MustPlan(Replicated(big, one_source), BuildMesh(big, one_replica), 0, 1 << 20), o);
  g.device = g.source_device = HostStandInMemory();  // the test's own writes do not fail (same memory)
  g.content = [](uint32_t, uint64_t) { return uint64_t{1}; };
  g.Update(1);
  PlanRank& src = *g.ranks.at(g.plan->sources[0].endpoint);
  auto* on_device = static_cast<std::byte*>(src.device_shard(0));
  on_device[0] ^= std::byte{1};              // block 0 changes
  on_device[(2 << 20) + 5] ^= std::byte{1};  // and block 2
  device->to_host_left = 1;                  // block 0 is copied, block 2 fails
  EXPECT_EQ(src.Publish(2).code(), StatusCode::kDataLoss);
  device->to_host_left = -1;
  g.Update(3);  // the trainer writes version 1's bytes again: what the hashes knew before
  g.ExpectLive(3);
}

}  // namespace
}  // namespace weightport::plan_device_test
