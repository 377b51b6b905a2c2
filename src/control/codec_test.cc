#include <gtest/gtest.h>

#include "weightport/control/protocol.h"

namespace weightport {
namespace {

Bytes B(std::string_view s) {
  auto v = std::as_bytes(std::span(s.data(), s.size()));
  return Bytes(v.begin(), v.end());
}

template <typename M>
void ExpectStrictRoundTrip(const M& m) {
  SCOPED_TRACE(std::string(MessageTypeName(M::kType)));
  Bytes bytes = m.Encode();
  auto back = M::Decode(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == m);
  EXPECT_TRUE(ValidatePayload(M::kType, bytes).ok());
  // Every truncation and one trailing byte are refused as InvalidArgument.
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto cut = M::Decode(ByteView(bytes).first(n));
    ASSERT_FALSE(cut.ok()) << "prefix " << n;
    EXPECT_EQ(cut.status().code(), StatusCode::kInvalidArgument);
  }
  Bytes longer = bytes;
  longer.push_back(std::byte{0});
  auto trailing = M::Decode(longer);
  ASSERT_FALSE(trailing.ok());
  EXPECT_NE(trailing.status().message().find("trailing"), std::string::npos) << trailing.status().ToString();
}

TEST(ControlCodecTest, EveryMessageRoundTripsStrictly) {
  Nonce n{};
  n[0] = std::byte{7};
  Digest d{};
  d[31] = std::byte{9};
  ExpectStrictRoundTrip(HelloMsg{PeerRole::kSubscriber, "sub-2"});
  ExpectStrictRoundTrip(ChallengeMsg{n});
  ExpectStrictRoundTrip(ProofMsg{n, d});
  ExpectStrictRoundTrip(WelcomeMsg{"coord", d});
  ExpectStrictRoundTrip(RefusedMsg{"authentication failed"});
  ExpectStrictRoundTrip(ManifestMsg{R"({"version":3})"});
  ExpectStrictRoundTrip(RegionKeysMsg{B("ucx-address"), {{1, B("key-one")}, {0xffffffffffffffffull, {}}}});
  ExpectStrictRoundTrip(PlacementMsg{"{}"});
  ExpectStrictRoundTrip(UpdateBeginMsg{42, 0x0102030405060708ull, 3});
  ExpectStrictRoundTrip(ChunksVerifiedMsg{42, 1000, 1ull << 33, 123456789, 2});
  ExpectStrictRoundTrip(CommittedMsg{42, 1500});
  ExpectStrictRoundTrip(PlanJoinMsg{1, 3, 0xfeedULL, Bytes(5, std::byte{7}), Bytes(9, std::byte{1}), {}, ""});
  ExpectStrictRoundTrip(PlanJoinMsg{0, 3, 0xfeedULL, Bytes(5, std::byte{7}), Bytes(9, std::byte{1}),
                                    Bytes(6, std::byte{8}), "cuda"});
  ExpectStrictRoundTrip(
      PlanPeersMsg{{{0, 0, Bytes(3, std::byte{2}), Bytes(4, std::byte{3}), Bytes(5, std::byte{6}), "cuda"},
                    {1, 7, Bytes(1, std::byte{4}), Bytes(2, std::byte{5}), {}, ""}}});
  ExpectStrictRoundTrip(PlanReadyMsg{9});
  ExpectStrictRoundTrip(PeerLostMsg{1, 7});
  ExpectStrictRoundTrip(RekeyMsg{12});
  FedMsg fed;
  fed.kind = FedKind::kUpdateChunk;
  fed.round = 3;
  fed.chunk = 9;
  fed.value = 0.125;
  fed.compressed = 1;
  fed.raw_bytes = 4;
  fed.data = Bytes(4, std::byte{7});
  ExpectStrictRoundTrip(fed);
  ExpectStrictRoundTrip(LayoutOfferMsg{1, 2, 4, "trainer-0", R"({"tensors":[]})"});
  ExpectStrictRoundTrip(PlanAssignMsg{R"({"steps":[]})"});
  ExpectStrictRoundTrip(UpdateFailedMsg{42, "chunk 7 hash mismatch"});
  ExpectStrictRoundTrip(CommitMsg{42});
  ExpectStrictRoundTrip(AbortMsg{42, "subscriber 'sub-1' failed"});
  EXPECT_TRUE(HeartbeatMsg::Decode({}).ok());
  EXPECT_TRUE(ByeMsg::Decode({}).ok());
  EXPECT_FALSE(ByeMsg::Decode(B("x")).ok());
}

TEST(ControlCodecTest, LayoutOfferRefusesARankOutsideItsSideAndAnEmptyHost) {
  EXPECT_FALSE(LayoutOfferMsg::Decode(LayoutOfferMsg{0, 4, 4, "h", "{}"}.Encode()).ok());
  EXPECT_FALSE(LayoutOfferMsg::Decode(LayoutOfferMsg{0, 0, 0, "h", "{}"}.Encode()).ok());
  EXPECT_FALSE(LayoutOfferMsg::Decode(LayoutOfferMsg{2, 0, 1, "h", "{}"}.Encode()).ok());
  EXPECT_FALSE(LayoutOfferMsg::Decode(LayoutOfferMsg{0, 0, 1, "", "{}"}.Encode()).ok());
  EXPECT_TRUE(LayoutOfferMsg::Decode(LayoutOfferMsg{0, 3, 4, "h", "{}"}.Encode()).ok());
}

TEST(ControlCodecTest, FieldsAreLittleEndian) {
  Bytes bytes = UpdateBeginMsg{0x0102030405060708ull, 1, 2}.Encode();
  ASSERT_EQ(bytes.size(), 24u);
  EXPECT_EQ(bytes[0], std::byte{0x08});
  EXPECT_EQ(bytes[7], std::byte{0x01});
  EXPECT_EQ(bytes[8], std::byte{0x01});
  EXPECT_EQ(bytes[16], std::byte{0x02});
  Bytes hello = HelloMsg{PeerRole::kPublisher, "ab"}.Encode();
  EXPECT_EQ(hello, (Bytes{std::byte{1}, std::byte{2}, std::byte{0}, std::byte{0}, std::byte{0},
                          std::byte{'a'}, std::byte{'b'}}));
}

TEST(ControlCodecTest, DecodersRefuseBadFields) {
  EXPECT_FALSE(HelloMsg::Decode(HelloMsg{static_cast<PeerRole>(4), "x"}.Encode()).ok());
  EXPECT_FALSE(HelloMsg::Decode(HelloMsg{PeerRole::kObserver, ""}.Encode()).ok());
  EXPECT_FALSE(HelloMsg::Decode(HelloMsg{PeerRole::kObserver, "bad\nname"}.Encode()).ok());
  EXPECT_FALSE(
      HelloMsg::Decode(HelloMsg{PeerRole::kObserver, std::string(kMaxNameSize + 1, 'a')}.Encode()).ok());
  EXPECT_FALSE(RefusedMsg::Decode(RefusedMsg{std::string(kMaxReasonSize + 1, 'r')}.Encode()).ok());
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

TEST(ControlCodecTest, FrameRoundTripAndChecks) {
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

TEST(ControlCodecTest, HeaderRefusesOversizeAndUnknownType) {
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
TEST(ControlCodecTest, FramesMatchTheSeedGenerator) {
  auto hello =
      EncodeFrame(MessageType::kHello, 0, HelloMsg{PeerRole::kSubscriber, "sub-2"}.Encode(), kHandshakeKey);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(ToHex(*hello),
            "0a00000001000000000000000002050000007375622d32"
            "6adb2a51f6ff5d492029f55d593c8efc2d8fe1b7a2e5fdd2185897b09cc731c2");
  auto commit = EncodeFrame(MessageType::kCommit, 0, CommitMsg{7}.Encode(), kHandshakeKey);
  ASSERT_TRUE(commit.ok());
  EXPECT_EQ(ToHex(*commit),
            "080000000c00000000000000000700000000000000"
            "02259da29a2d0171226ddfdda5eb8a8e8c8d4d0537d113ef668f31c484c30215");
}

}  // namespace
}  // namespace weightport
