#include "weightport/control/pubsub_messages.h"

#include <gtest/gtest.h>

#include "codec_test_util.h"

namespace weightport {
namespace {

using control_test::B;
using control_test::ExpectStrictRoundTrip;

TEST(PubsubMessagesTest, EveryMessageRoundTripsStrictly) {
  ExpectStrictRoundTrip(ManifestMsg{R"({"version":3})"});
  ExpectStrictRoundTrip(RegionKeysMsg{B("ucx-address"), {{1, B("key-one")}, {0xffffffffffffffffull, {}}}});
  ExpectStrictRoundTrip(PlacementMsg{"{}"});
  ExpectStrictRoundTrip(StagingReadyMsg{.bytes = 2ull << 30, .prepare_ns = 660'000'000});
}

TEST(PubsubMessagesTest, DecodersRefuseBadFields) {
  // A string length far beyond the payload.
  Bytes huge_len = {std::byte{0xff}, std::byte{0xff}, std::byte{0xff}, std::byte{0x7f}};
  EXPECT_FALSE(ManifestMsg::Decode(huge_len).ok());
  // A region count the payload cannot hold is refused before reserving anything.
  Bytes regions = {std::byte{0},    std::byte{0},    std::byte{0},    std::byte{0},
                   std::byte{0xff}, std::byte{0xff}, std::byte{0xff}, std::byte{0xff}};
  auto r = RegionKeysMsg::Decode(regions);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot fit"), std::string::npos);
}

}  // namespace
}  // namespace weightport
