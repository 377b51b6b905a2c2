#include "weightport/control/plan_messages.h"

#include <gtest/gtest.h>

#include "codec_test_util.h"

namespace weightport {
namespace {

using control_test::ExpectStrictRoundTrip;

TEST(PlanMessagesTest, EveryMessageRoundTripsStrictly) {
  ExpectStrictRoundTrip(PlanJoinMsg{1, 3, 0xfeedULL, Bytes(5, std::byte{7}), Bytes(9, std::byte{1}), {}, ""});
  ExpectStrictRoundTrip(PlanJoinMsg{0, 3, 0xfeedULL, Bytes(5, std::byte{7}), Bytes(9, std::byte{1}),
                                    Bytes(6, std::byte{8}), "cuda"});
  ExpectStrictRoundTrip(
      PlanPeersMsg{{{0, 0, Bytes(3, std::byte{2}), Bytes(4, std::byte{3}), Bytes(5, std::byte{6}), "cuda"},
                    {1, 7, Bytes(1, std::byte{4}), Bytes(2, std::byte{5}), {}, ""}}});
  ExpectStrictRoundTrip(PlanReadyMsg{9});
  ExpectStrictRoundTrip(PlanReadyMsg{9, {{0, 0x1234}, {7, ~0ull}}});
  ExpectStrictRoundTrip(PeerLostMsg{1, 7});
  ExpectStrictRoundTrip(RekeyMsg{12});
  ExpectStrictRoundTrip(RollbackMsg{3});
  ExpectStrictRoundTrip(LayoutOfferMsg{1, 2, 4, "trainer-0", R"({"tensors":[]})"});
  ExpectStrictRoundTrip(PlanAssignMsg{std::string("WPRANK1\0\x01", 9)});
}

TEST(PlanMessagesTest, LayoutOfferRefusesARankOutsideItsSideAndAnEmptyHost) {
  EXPECT_FALSE(LayoutOfferMsg::Decode(LayoutOfferMsg{0, 4, 4, "h", "{}"}.Encode()).ok());
  EXPECT_FALSE(LayoutOfferMsg::Decode(LayoutOfferMsg{0, 0, 0, "h", "{}"}.Encode()).ok());
  EXPECT_FALSE(LayoutOfferMsg::Decode(LayoutOfferMsg{2, 0, 1, "h", "{}"}.Encode()).ok());
  EXPECT_FALSE(LayoutOfferMsg::Decode(LayoutOfferMsg{0, 0, 1, "", "{}"}.Encode()).ok());
  EXPECT_TRUE(LayoutOfferMsg::Decode(LayoutOfferMsg{0, 3, 4, "h", "{}"}.Encode()).ok());
}

}  // namespace
}  // namespace weightport
