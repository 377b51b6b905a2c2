#include "weightport/kernels/compress.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace weightport::kernels {
namespace {

std::vector<std::byte> Bytes(size_t n, uint32_t seed, bool random) {
  std::vector<std::byte> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(random ? rng() : (i % 251 == 0 ? rng() : 0));
  return v;
}

TEST(Compress, RoundTripsAndTheRatioFollowsTheData) {
  for (bool random : {false, true}) {
    const std::vector<std::byte> src = Bytes(1 << 20, 5, random);
    std::vector<std::byte> frame;
    ASSERT_TRUE(ZstdCompress(src, 1, frame).ok());
    std::vector<std::byte> back(src.size());
    ASSERT_TRUE(ZstdDecompress(frame, back).ok());
    EXPECT_EQ(back, src);
    auto ratio = CompressionRatio(src);
    ASSERT_TRUE(ratio.ok());
    if (random)
      EXPECT_EQ(*ratio, 1.0);  // random bytes do not compress
    else
      EXPECT_GT(*ratio, 20.0);  // a sparse delta compresses well
  }
}

TEST(Compress, CorruptTruncatedOrMisSizedFramesAreErrors) {
  const std::vector<std::byte> src = Bytes(100000, 9, false);
  std::vector<std::byte> frame;
  ASSERT_TRUE(ZstdCompress(src, 3, frame).ok());
  std::vector<std::byte> back(src.size());
  std::vector<std::byte> truncated(frame.begin(), frame.begin() + frame.size() / 2);
  EXPECT_FALSE(ZstdDecompress(truncated, back).ok());
  std::vector<std::byte> smaller(src.size() - 1);
  Status st = ZstdDecompress(frame, smaller);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("100000"), std::string::npos) << st.ToString();
  std::vector<std::byte> garbage = Bytes(64, 1, true);
  EXPECT_FALSE(ZstdDecompress(garbage, back).ok());
  EXPECT_FALSE(ZstdCompress(src, 99, frame).ok());
  EXPECT_FALSE(ZstdCompress(src, 0, frame).ok());
}

TEST(Compress, ItPaysOnlyWhenTheLinkIsTheBottleneckAndTheDataShrinks) {
  // 100 Mbit/s link, a compressor at 400 MB/s, a decompressor at 1 GB/s.
  CompressionRates slow{12.5e6, 400e6, 1e9};
  EXPECT_TRUE(WorthCompressing(slow, 1.3));    // 16.25 MB/s > 12.5 MB/s x 1.1
  EXPECT_FALSE(WorthCompressing(slow, 1.05));  // shrinks too little
  EXPECT_DOUBLE_EQ(CompressedRate(slow, 4.0), 50e6);
  // 100 Gbit/s link: the compressor is the bottleneck, never worth it.
  CompressionRates fast{12.5e9, 400e6, 1e9};
  EXPECT_FALSE(WorthCompressing(fast, 10.0));
  EXPECT_DOUBLE_EQ(CompressedRate(fast, 10.0), 400e6);
}

}  // namespace
}  // namespace weightport::kernels
