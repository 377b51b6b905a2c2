// CudaStager: bytes through the pinned double buffer, both ways, in order and exact. Skipped, with
// the reason, without CUDA or a GPU.
#include "weightport/cuda/staging.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "weightport/cuda/device_buffer.h"
#include "weightport/cuda/device_query.h"

namespace weightport {
namespace {

class CudaStagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = cuda_test::NoGpuReason(); !why.empty()) GTEST_SKIP() << why;
  }
};

std::vector<std::byte> Pattern(size_t n) {
  std::vector<std::byte> out(n);
  uint64_t x = 12345;
  for (auto& b : out) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = std::byte(x >> 56);
  }
  return out;
}

TEST_F(CudaStagerTest, BothWaysChunkByChunkInOrder) {
  constexpr size_t kChunk = 1 << 20, kBytes = 5 * kChunk + 12345;  // a partial last chunk
  auto stager = CudaStager::Create(kChunk);
  ASSERT_TRUE(stager.ok()) << stager.status().ToString();
  auto device = DeviceBuffer::Allocate(kBytes);
  ASSERT_TRUE(device.ok());
  const std::vector<std::byte> want = Pattern(kBytes);
  // Host -> device through the stager, read back plainly.
  std::vector<uint64_t> produced;
  ASSERT_TRUE((*stager)
                  ->ToDevice(device->data(), kBytes,
                             [&](uint64_t at, std::span<std::byte> chunk) {
                               produced.push_back(at);
                               std::memcpy(chunk.data(), want.data() + at, chunk.size());
                               return Status::Ok();
                             })
                  .ok());
  EXPECT_EQ(produced.size(), 6u);
  std::vector<std::byte> back(kBytes);
  ASSERT_TRUE(device->CopyTo(back).ok());
  EXPECT_TRUE(back == want);
  // Device -> host through the stager.
  std::vector<std::byte> got;
  ASSERT_TRUE((*stager)
                  ->FromDevice(device->data(), kBytes,
                               [&](uint64_t at, std::span<const std::byte> chunk) {
                                 EXPECT_EQ(at, got.size());
                                 got.insert(got.end(), chunk.begin(), chunk.end());
                                 return Status::Ok();
                               })
                  .ok());
  EXPECT_TRUE(got == want);
}

TEST_F(CudaStagerTest, AConsumerErrorStopsTheRun) {
  auto stager = CudaStager::Create(4096);
  ASSERT_TRUE(stager.ok());
  auto device = DeviceBuffer::Allocate(10 * 4096);
  ASSERT_TRUE(device.ok());
  int calls = 0;
  Status s = (*stager)->FromDevice(device->data(), 10 * 4096, [&](uint64_t, std::span<const std::byte>) {
    return ++calls == 3 ? DataLoss("peer 'h1' went away") : Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(calls, 3);
}

TEST(CudaStagerBuild, WithoutAGpuCreateSaysWhy) {
  if (cuda_test::NoGpuReason().empty()) GTEST_SKIP() << "a GPU is present";
  auto stager = CudaStager::Create(1 << 20);
  EXPECT_FALSE(stager.ok());
  EXPECT_EQ(CudaStager::Create(0).ok(), false);
}

}  // namespace
}  // namespace weightport
