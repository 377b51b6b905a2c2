#include "base64.h"

#include <string>

#include <gtest/gtest.h>

namespace weightport::store_internal {
namespace {

TEST(Base64Test, MatchesRfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Decode("Zm9vYmE="), "fooba");
  EXPECT_EQ(Base64Decode("Zg=="), "f");
  EXPECT_EQ(Base64Decode(""), "");
}

TEST(Base64Test, RoundTripsEveryByteValue) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t len = 0; len <= all.size(); len += 37) {
    std::string part = all.substr(0, len) + std::string("\0\xff", 2);
    auto back = Base64Decode(Base64Encode(part));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, part);
  }
}

TEST(Base64Test, RefusesMalformedText) {
  EXPECT_FALSE(Base64Decode("Zm9").has_value());       // length not a multiple of 4
  EXPECT_FALSE(Base64Decode("Zm9*").has_value());      // outside the alphabet
  EXPECT_FALSE(Base64Decode("Zg==Zm9v").has_value());  // padding before the end
  EXPECT_FALSE(Base64Decode("Z===").has_value());
}

}  // namespace
}  // namespace weightport::store_internal
