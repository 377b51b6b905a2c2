#include "weightport/core/hash.h"

#include <gtest/gtest.h>

#include <vector>

namespace weightport {
namespace {

TEST(HashTest, KnownXxh3Values) {
  // Reference values from the xxHash project (XXH3_64bits, seed 0).
  EXPECT_EQ(Xxh3("", 0), 0x2d06800538d394c2ull);
  EXPECT_EQ(HashToHex(0x2d06800538d394c2ull), "2d06800538d394c2");
}

TEST(HashTest, ChunkHashesCoverEveryByte) {
  std::vector<std::byte> data(10);
  for (size_t i = 0; i < data.size(); ++i) data[i] = std::byte(i);
  auto h = ChunkHashes(data, 4);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0], Xxh3(data.data(), 4));
  EXPECT_EQ(h[2], Xxh3(data.data() + 8, 2));
  EXPECT_TRUE(ChunkHashes({}, 4).empty());
  EXPECT_TRUE(ChunkHashes(data, 0).empty());
}

TEST(HashTest, OneBitChangesTheChunkHash) {
  std::vector<std::byte> a(4096, std::byte{7}), b = a;
  b[3000] ^= std::byte{1};
  auto ha = ChunkHashes(a, 1024), hb = ChunkHashes(b, 1024);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_EQ(ha[1], hb[1]);
  EXPECT_NE(ha[2], hb[2]);
  EXPECT_EQ(ha[3], hb[3]);
}

}  // namespace
}  // namespace weightport
