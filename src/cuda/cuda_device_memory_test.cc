// CudaDeviceMemory: copies through the pinned double buffer of any size, and PlanRank with its
// shards on the GPU (sources publish what the trainer wrote there, destinations get the versions
// there). Skipped, with the reason, without CUDA or a GPU.
#include "weightport/cuda/device_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "cuda/cuda_test_util.h"
#include "engine/plan_rank_test_util.h"

namespace weightport {
namespace {

using namespace plan_rank_test;

class CudaDeviceMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = cuda_test::NoGpuReason(); !why.empty()) GTEST_SKIP() << why;
    auto made = CudaDeviceMemory(1 << 20);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    device = *made;
  }
  std::shared_ptr<DeviceMemory> device;
};

TEST_F(CudaDeviceMemoryTest, BytesGoThereAndBackWhateverTheirSize) {
  std::mt19937_64 rng(3);
  for (size_t bytes : {size_t{1}, size_t{4095}, size_t{1} << 20, (size_t{5} << 20) + 17}) {
    std::vector<std::byte> want(bytes), got(bytes);
    for (auto& b : want) b = std::byte(rng());
    auto memory = device->Allocate(bytes);
    ASSERT_TRUE(memory.ok()) << memory.status().ToString();
    ASSERT_TRUE(device->ToDevice(want, memory->get()).ok());
    ASSERT_TRUE(device->ToHost(memory->get(), got).ok());
    EXPECT_TRUE(got == want) << bytes << " bytes";
    // And on the device, from one allocation to another at an odd offset.
    auto other = device->Allocate(bytes + 3);
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    ASSERT_TRUE(device->CopyOnDevice(memory->get(), static_cast<std::byte*>(other->get()) + 3, bytes).ok());
    std::fill(got.begin(), got.end(), std::byte{0});
    ASSERT_TRUE(device->ToHost(static_cast<std::byte*>(other->get()) + 3, got).ok());
    EXPECT_TRUE(got == want) << bytes << " bytes, copied on the device";
  }
}

TEST_F(CudaDeviceMemoryTest, PlanRanksKeepEveryVersionOnTheGpu) {
  EXPECT_EQ(device->name().rfind("cuda:", 0), 0u) << device->name();
  PlanRankOptions o;
  o.device = device;
  Group g(MustPlan(FsdpFlat(BlockModel(DType::kBF16), 3), BuildMesh(BlockModel(DType::kBF16), TpReplicas()),
                   1, 1024, {{"*_proj.weight", DType::kF8E4M3}}),
          o);
  g.content = [](uint32_t t, uint64_t v) { return t == 0 ? uint64_t{1} : v; };  // delta: kept on the GPU
  for (uint64_t v = 1; v <= 3; ++v) {
    const ReceiveStats s = g.Update(v);
    EXPECT_EQ(s.kept_chunks > 0, v > 1) << "version " << v;
    g.ExpectLive(v);
  }
}

TEST(CudaDeviceMemoryBuild, WithoutAGpuCreateSaysWhy) {
  if (cuda_test::NoGpuReason().empty()) GTEST_SKIP() << "a GPU is present";
  EXPECT_FALSE(CudaDeviceMemory().ok());
}

}  // namespace
}  // namespace weightport
