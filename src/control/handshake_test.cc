#include "weightport/control/handshake.h"

#include <gtest/gtest.h>

#include "codec_test_util.h"
#include "weightport/control/auth.h"

namespace weightport {
namespace {

using control_test::B;
using control_test::ExpectStrictRoundTrip;

TEST(HandshakeMessagesTest, EveryMessageRoundTripsStrictly) {
  Nonce n{};
  n[0] = std::byte{7};
  Digest d{};
  d[31] = std::byte{9};
  ExpectStrictRoundTrip(HelloMsg{PeerRole::kSubscriber, "sub-2"});
  ExpectStrictRoundTrip(ChallengeMsg{n});
  ExpectStrictRoundTrip(ProofMsg{n, d});
  ExpectStrictRoundTrip(WelcomeMsg{"coord", d});
  ExpectStrictRoundTrip(RefusedMsg{"authentication failed"});
  EXPECT_TRUE(HeartbeatMsg::Decode({}).ok());
  EXPECT_TRUE(ByeMsg::Decode({}).ok());
  EXPECT_FALSE(ByeMsg::Decode(B("x")).ok());
}

TEST(HandshakeMessagesTest, FieldsAreLittleEndian) {
  Bytes hello = HelloMsg{PeerRole::kPublisher, "ab"}.Encode();
  EXPECT_EQ(hello, (Bytes{std::byte{1}, std::byte{2}, std::byte{0}, std::byte{0}, std::byte{0},
                          std::byte{'a'}, std::byte{'b'}}));
}

TEST(HandshakeMessagesTest, DecodersRefuseBadFields) {
  EXPECT_FALSE(HelloMsg::Decode(HelloMsg{static_cast<PeerRole>(4), "x"}.Encode()).ok());
  EXPECT_FALSE(HelloMsg::Decode(HelloMsg{PeerRole::kObserver, ""}.Encode()).ok());
  EXPECT_FALSE(HelloMsg::Decode(HelloMsg{PeerRole::kObserver, "bad\nname"}.Encode()).ok());
  EXPECT_FALSE(
      HelloMsg::Decode(HelloMsg{PeerRole::kObserver, std::string(kMaxNameSize + 1, 'a')}.Encode()).ok());
  EXPECT_FALSE(RefusedMsg::Decode(RefusedMsg{std::string(kMaxReasonSize + 1, 'r')}.Encode()).ok());
}

TEST(HandshakeMessagesTest, ARefusalReasonIsDecodedEscapedAndFitsItsBound) {
  auto got = RefusedMsg::Decode(RefusedMsg{"no\xff\n"}.Encode());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->reason, "no\\xff\\x0a");
  auto worst = RefusedMsg::Decode(RefusedMsg{std::string(kMaxReasonSize, '\n')}.Encode());
  ASSERT_TRUE(worst.ok());
  EXPECT_LE(worst->reason.size(), kMaxReasonSize);  // it can be sent on as a reason again
  EXPECT_TRUE(RefusedMsg::Decode(worst->Encode()).ok());
}

}  // namespace
}  // namespace weightport
