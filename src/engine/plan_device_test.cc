// PlanRank with its shards on a device (PlanRankOptions::device), host memory standing in for the
// device: sources publish what the trainer wrote there, destinations' device copies follow their
// live copies and do not change before Commit. (cuda_tests runs the same with a GPU.)
#include <gtest/gtest.h>

#include <cstring>

#include "engine/plan_rank_test_util.h"
#include "weightport/core/device_memory.h"

namespace weightport {
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

// Between Receive and Commit the device's live copy still holds the old version; Commit flips it.
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

// A device that fails a copy: Publish and Receive say which shard, which tensor, which device.
class FailingDevice final : public DeviceMemory {
 public:
  std::string name() const override { return "flaky device"; }
  Result<std::shared_ptr<void>> Allocate(size_t bytes) override { return host_->Allocate(bytes); }
  Status ToHost(const void* device, std::span<std::byte> host) override {
    return fail_to_host ? DataLoss("ECC error") : host_->ToHost(device, host);
  }
  Status ToDevice(std::span<const std::byte> host, void* device) override {
    return fail_to_device ? DataLoss("ECC error") : host_->ToDevice(host, device);
  }
  bool fail_to_host = false, fail_to_device = false;

 private:
  std::shared_ptr<DeviceMemory> host_ = HostStandInMemory();
};

TEST(PlanRankDevice, AFailedCopyNamesTheShardAndTheDeviceAndLosesNothing) {
  auto device = std::make_shared<FailingDevice>();
  PlanRankOptions o;
  o.device = device;
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 2), 0), o);
  g.device = HostStandInMemory();  // the test's own writes and checks do not fail (same memory)
  g.Update(1);
  device->fail_to_host = true;
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

}  // namespace
}  // namespace weightport
