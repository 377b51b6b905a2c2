// The XXH3 parts the GPU chunk hashes are built from, put together on the CPU exactly as the
// kernels put them together (block sums by quartets of lanes, then the scrambles in order), against
// libxxhash. Runs everywhere: it needs no GPU.
#include "cuda/xxh3_parts.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>
#include <vector>

namespace weightport::xxh3 {
namespace {

constexpr uint8_t kSecret[kSecretSize] = WP_XXH3_SECRET_BYTES;

// One block's sum as the GPU computes it: two threads, each adding up one quartet of lanes over
// the block's stripes.
void BlockSum(const uint8_t* block, size_t stripes, uint64_t sum[8]) {
  for (int first : {0, 4}) {
    uint64_t part[4] = {0, 0, 0, 0};
    for (size_t s = 0; s < stripes; ++s) {
      uint64_t words[4], keys[4];
      for (int j = 0; j < 4; ++j) {
        words[j] = Read64(block + s * kStripe + 8 * (first + j));
        keys[j] = StripeKey(s, first + j, kSecret);
      }
      AddQuartet(words, keys, part);
    }
    for (int j = 0; j < 4; ++j) sum[first + j] = part[j];
  }
}

uint64_t HashByParts(const uint8_t* in, size_t len) {
  if (len <= kMidSizeMax) return HashShort(in, len, kSecret);
  const LongShape shape = ShapeOf(len);
  uint64_t acc[8], sum[8];
  for (int lane = 0; lane < 8; ++lane) acc[lane] = InitialAccumulator(lane);
  for (size_t b = 0; b < shape.full_blocks; ++b) {
    BlockSum(in + b * kBlock, kStripesPerBlock, sum);
    for (int lane = 0; lane < 8; ++lane)
      acc[lane] = ScrambleLane(acc[lane] + sum[lane], ScrambleKey(lane, kSecret));
  }
  BlockSum(in + shape.full_blocks * kBlock, shape.tail_stripes, sum);
  for (int lane = 0; lane < 8; ++lane) acc[lane] += sum[lane];
  AddLastStripe(acc, in + len - kStripe, kSecret);
  return MergeAccumulators(acc, len, kSecret);
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(Xxh3Parts, TheSecretIsLibxxhashs) {
  // XXH3 with a custom secret equal to the default must hash like the default.
  const auto data = RandomBytes(5000, 1);
  EXPECT_EQ(XXH3_64bits_withSecret(data.data(), data.size(), kSecret, sizeof kSecret),
            XXH3_64bits(data.data(), data.size()));
}

TEST(Xxh3Parts, EveryLengthUpToThreeBlocksMatchesLibxxhash) {
  // Every short-path class (0, 1-3, 4-8, 9-16, 17-128, 129-240), the block path with 0..15 tail
  // stripes, and the block boundaries (1024, 2048 +/- 1).
  const auto data = RandomBytes(3 * kBlock + 200, 2);
  for (size_t len = 0; len <= data.size(); ++len)
    ASSERT_EQ(HashByParts(data.data(), len), XXH3_64bits(data.data(), len)) << "length " << len;
}

TEST(Xxh3Parts, LongAndOddInputsMatchLibxxhash) {
  std::mt19937_64 rng(3);
  const auto data = RandomBytes((4 << 20) + 333, 4);
  for (int i = 0; i < 40; ++i) {
    const size_t off = rng() % 64;
    const size_t len = i < 4 ? data.size() - off : rng() % (data.size() - off);
    ASSERT_EQ(HashByParts(data.data() + off, len), XXH3_64bits(data.data() + off, len))
        << "offset " << off << " length " << len;
  }
  // Constant data, where a lane mix-up could cancel out, and all-ones words.
  const std::vector<uint8_t> zeros(70000, 0), ones(70000, 0xff);
  EXPECT_EQ(HashByParts(zeros.data(), zeros.size()), XXH3_64bits(zeros.data(), zeros.size()));
  EXPECT_EQ(HashByParts(ones.data(), ones.size()), XXH3_64bits(ones.data(), ones.size()));
}

}  // namespace
}  // namespace weightport::xxh3
