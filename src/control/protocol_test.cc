#include <gtest/gtest.h>

#include "weightport/control/auth.h"
#include "weightport/control/handshake.h"
#include "weightport/control/protocol.h"
#include "weightport/control/version_messages.h"

namespace weightport {
namespace {

TEST(ControlFrameTest, FrameRoundTripAndChecks) {
  Digest key{};
  key[0] = std::byte{1};
  Bytes payload = CommitMsg{5}.Encode();
  auto frame = EncodeFrame(MessageType::kCommit, 3, payload, key);
  ASSERT_TRUE(frame.ok());
  ASSERT_EQ(frame->size(), kFrameHeaderSize + payload.size() + kFrameMacSize);
  auto decoded = DecodeFrame(*frame, key, 3);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->type, MessageType::kCommit);
  EXPECT_EQ(decoded->payload, payload);

  // Wrong sequence number: replay or reorder.
  auto replay = DecodeFrame(*frame, key, 4);
  ASSERT_FALSE(replay.ok());
  EXPECT_EQ(replay.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(replay.status().message().find("replayed"), std::string::npos);
  // Any flipped byte is refused.
  for (size_t i = 0; i < frame->size(); ++i) {
    Bytes bad = *frame;
    bad[i] ^= std::byte{0x40};
    EXPECT_FALSE(DecodeFrame(bad, key, 3).ok()) << "byte " << i;
  }
  // A different key.
  EXPECT_EQ(DecodeFrame(*frame, kHandshakeKey, 3).status().code(), StatusCode::kPermissionDenied);
  // Truncated and trailing.
  EXPECT_FALSE(DecodeFrame(ByteView(*frame).first(frame->size() - 1), key, 3).ok());
  Bytes longer = *frame;
  longer.push_back(std::byte{0});
  EXPECT_FALSE(DecodeFrame(longer, key, 3).ok());
}

TEST(ControlFrameTest, HeaderRefusesOversizeAndUnknownType) {
  Bytes header(kFrameHeaderSize, std::byte{0});
  header[4] = std::byte{static_cast<uint8_t>(MessageType::kHeartbeat)};
  EXPECT_TRUE(DecodeFrameHeader(header, 0).ok());
  header[0] = std::byte{0xff};
  header[3] = std::byte{0xff};
  auto big = DecodeFrameHeader(header, kDefaultMaxPayload);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("exceeds"), std::string::npos);
  header[0] = header[3] = std::byte{0};
  header[4] = std::byte{0};
  EXPECT_FALSE(DecodeFrameHeader(header, 100).ok());
  header[4] = std::byte{kMaxMessageType + 1};
  EXPECT_FALSE(DecodeFrameHeader(header, 100).ok());
  EXPECT_EQ(MessageTypeName(static_cast<MessageType>(200)), "Unknown");
}

// The frame bytes of two seeds written by fuzz/make_control_codec_seeds.py (Python's hmac): an
// independent check of the frame layout and MAC input.
TEST(ControlFrameTest, FramesMatchTheSeedGenerator) {
  auto hello =
      EncodeFrame(MessageType::kHello, 0, HelloMsg{PeerRole::kSubscriber, "sub-2"}.Encode(), kHandshakeKey);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(ToHex(*hello),
            "0a00000001000000000000000002050000007375622d32"
            "6adb2a51f6ff5d492029f55d593c8efc2d8fe1b7a2e5fdd2185897b09cc731c2");
  auto commit = EncodeFrame(MessageType::kCommit, 0, CommitMsg{7, 2}.Encode(), kHandshakeKey);
  ASSERT_TRUE(commit.ok());
  EXPECT_EQ(ToHex(*commit),
            "100000000c000000000000000007000000000000000200000000000000"
            "26e72e52b72cba7fac4b5ce0ec3f2f31e082558f51de35cb50bfd787dc8ddb41");
}

}  // namespace
}  // namespace weightport
