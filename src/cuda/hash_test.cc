// CudaChunkHashes against ChunkHashes (libxxhash), hash for hash: every short-path length class,
// block boundaries, unaligned starts and chunk sizes, a partial last chunk, and 64 MiB in 4 MiB
// chunks. Skipped, with the reason, without CUDA or a GPU.
#include "weightport/cuda/hash.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "weightport/core/hash.h"
#include "weightport/cuda/device_buffer.h"

namespace weightport {
namespace {

class CudaHashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = cuda_test::NoGpuReason(); !why.empty()) GTEST_SKIP() << why;
  }

  // The chunk hashes of data[offset, offset + bytes) computed on the GPU, with scratch of the
  // caller's or the call's own.
  static std::vector<uint64_t> OnGpu(const DeviceBuffer& data, size_t offset, size_t bytes, uint64_t chunk,
                                     bool caller_scratch = false) {
    const size_t n = (bytes + chunk - 1) / chunk;
    auto out = DeviceBuffer::Allocate(n * sizeof(uint64_t));
    auto scratch = DeviceBuffer::Allocate(CudaChunkHashScratchBytes(bytes, chunk));
    EXPECT_TRUE(out.ok() && scratch.ok());
    if (!out.ok() || !scratch.ok()) return {};
    const Status s = CudaChunkHashes(static_cast<const std::byte*>(data.data()) + offset, bytes, chunk,
                                     static_cast<uint64_t*>(out->data()), nullptr,
                                     caller_scratch ? scratch->data() : nullptr);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(CudaSynchronize().ok());
    std::vector<uint64_t> hashes(n);
    EXPECT_TRUE(out->CopyTo(std::as_writable_bytes(std::span(hashes))).ok());
    return hashes;
  }
};

std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = std::byte(rng());
  return out;
}

TEST_F(CudaHashTest, EveryChunkSizeClassMatchesTheCpu) {
  const std::vector<std::byte> host = RandomBytes(3 * 1024 * 7 + 100, 1);
  auto dev = DeviceBuffer::Allocate(host.size());
  ASSERT_TRUE(dev.ok());
  ASSERT_TRUE(dev->CopyFrom(host).ok());
  // Short paths (1, 3, 8, 16, 100, 240), the block path with and without tail stripes, block
  // boundaries, odd sizes that make every load unaligned.
  for (uint64_t chunk : {1, 3, 8, 16, 100, 240, 241, 255, 1024, 1025, 2047, 2048, 4000, 21604})
    for (size_t offset : {0, 1, 16}) {
      const size_t bytes = host.size() - offset;
      const auto cpu = ChunkHashes(std::span(host).subspan(offset, bytes), chunk);
      ASSERT_EQ(OnGpu(*dev, offset, bytes, chunk, offset == 16), cpu)
          << "chunk " << chunk << " offset " << offset;
    }
}

TEST_F(CudaHashTest, ManyLargeChunksMatchTheCpu) {
  const std::vector<std::byte> host = RandomBytes((64 << 20) + 777, 2);  // a partial last chunk
  auto dev = DeviceBuffer::Allocate(host.size());
  ASSERT_TRUE(dev.ok());
  ASSERT_TRUE(dev->CopyFrom(host).ok());
  EXPECT_EQ(OnGpu(*dev, 0, host.size(), 4 << 20), ChunkHashes(host, 4 << 20));
}

TEST(CudaHashBuild, WithoutAGpuOrWithBadArgumentsNothingIsHashed) {
  uint64_t out = 0;
  std::byte in{};
  const Status zero = CudaChunkHashes(&in, 1, 0, &out);
  EXPECT_FALSE(zero.ok());
  if (cuda_test::NoGpuReason().empty()) {
    EXPECT_EQ(zero.code(), StatusCode::kInvalidArgument);
  } else {
    EXPECT_FALSE(CudaChunkHashes(&in, 1, 64, &out).ok()) << "a build without a GPU hashes nothing";
  }
}

}  // namespace
}  // namespace weightport
