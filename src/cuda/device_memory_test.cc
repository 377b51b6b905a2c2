// CudaDeviceMemory: copies through the pinned double buffer of any size, and PlanRank with its
// shards on the GPU (sources publish what the trainer wrote there, destinations get the versions
// there). Skipped, with the reason, without CUDA or a GPU.
#include "weightport/cuda/device_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "cuda/cuda_test_util.h"
#include "engine/testing/plan_rank_test_util.h"
#include "weightport/core/hash.h"

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

// What device_direct verifies a chunk with: the xxh3 of parts one after the other, on the GPU,
// equal to the CPU's over the same bytes: one part, parts gathered, empty parts among them, none.
TEST_F(CudaDeviceMemoryTest, HashOfConcatenatedPartsEqualsTheCpusOfTheSameBytes) {
  EXPECT_EQ(device->memory_type(), "cuda");
  std::mt19937_64 rng(5);
  const size_t bytes = (size_t{3} << 20) + 29;
  std::vector<std::byte> host(bytes);
  for (auto& b : host) b = std::byte(rng());
  auto memory = device->Allocate(bytes);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  ASSERT_TRUE(device->ToDevice(host, memory->get()).ok());
  const auto* d = static_cast<const std::byte*>(memory->get());
  auto part = [&](size_t at, size_t n) { return DeviceBytes{d + at, n}; };
  // Parts out of order: [2 MiB, end), [7, 2 MiB), [0, 7): the CPU hashes the same sequence.
  const std::vector<DeviceBytes> shuffled = {part(2 << 20, bytes - (2 << 20)), part(7, (2 << 20) - 7),
                                             part(0, 0), part(0, 7)};
  std::vector<std::byte> sequence;
  for (const DeviceBytes& p : shuffled) {
    const auto* at = host.data() + (static_cast<const std::byte*>(p.data) - d);
    sequence.insert(sequence.end(), at, at + p.size);
  }
  for (const auto& [parts, want] : std::vector<std::pair<std::vector<DeviceBytes>, uint64_t>>{
           {{part(0, bytes)}, Xxh3(host.data(), bytes)},
           {{part(0, 0), part(5, 1000), part(0, 0)}, Xxh3(host.data() + 5, 1000)},
           {shuffled, Xxh3(sequence.data(), sequence.size())},
           {{}, Xxh3(nullptr, 0)}}) {
    auto got = device->HashConcatenated(parts);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, want) << parts.size() << " parts";
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
