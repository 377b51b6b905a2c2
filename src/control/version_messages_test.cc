#include "weightport/control/version_messages.h"

#include <gtest/gtest.h>

#include "codec_test_util.h"

namespace weightport {
namespace {

using control_test::ExpectStrictRoundTrip;

TEST(VersionMessagesTest, EveryMessageRoundTripsStrictly) {
  ExpectStrictRoundTrip(UpdateBeginMsg{42, 0x0102030405060708ull, 3, 2, 30'000});
  ExpectStrictRoundTrip(ChunksVerifiedMsg{42, 1000, 1ull << 33, 123456789, 2});
  ExpectStrictRoundTrip(CommittedMsg{42, 1500});
  ExpectStrictRoundTrip(UpdateFailedMsg{42, "chunk 7 hash mismatch"});
  ExpectStrictRoundTrip(CommitMsg{42, 3});
  ExpectStrictRoundTrip(AbortMsg{42, "subscriber 'sub-1' failed"});
}

TEST(VersionMessagesTest, FieldsAreLittleEndian) {
  Bytes bytes = UpdateBeginMsg{0x0102030405060708ull, 1, 2, 3, 4}.Encode();
  ASSERT_EQ(bytes.size(), 40u);
  EXPECT_EQ(bytes[0], std::byte{0x08});
  EXPECT_EQ(bytes[7], std::byte{0x01});
  EXPECT_EQ(bytes[8], std::byte{0x01});
  EXPECT_EQ(bytes[16], std::byte{0x02});
  EXPECT_EQ(bytes[24], std::byte{0x03});
  EXPECT_EQ(bytes[32], std::byte{0x04});
}

}  // namespace
}  // namespace weightport
