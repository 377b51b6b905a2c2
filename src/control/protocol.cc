// Framing of control messages: header, bound check, MAC and sequence check (protocol.h).
#include "weightport/control/protocol.h"

#include <cstring>

namespace weightport {
namespace {

uint64_t LoadLe(ByteView bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes.size(); ++i)
    v |= static_cast<uint64_t>(std::to_integer<uint8_t>(bytes[i])) << (8 * i);
  return v;
}

void StoreLe(uint64_t v, std::span<std::byte> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::byte(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

std::string_view MessageTypeName(MessageType type) {
  static constexpr std::string_view kNames[] = {
      "Unknown",   "Hello",      "Challenge",   "Proof",       "Welcome",        "Refused",
      "Manifest",  "RegionKeys", "Placement",   "UpdateBegin", "ChunksVerified", "UpdateFailed",
      "Commit",    "Abort",      "Heartbeat",   "Bye",         "Committed",      "PlanJoin",
      "PlanPeers", "PlanReady",  "LayoutOffer", "PlanAssign",  "PeerLost",       "Fed",
      "Rekey",     "Rollback",   "StagingReady"};
  auto i = static_cast<uint8_t>(type);
  return i <= kMaxMessageType ? kNames[i] : kNames[0];
}

std::string_view PeerRoleName(PeerRole role) {
  switch (role) {
    case PeerRole::kPublisher:
      return "publisher";
    case PeerRole::kSubscriber:
      return "subscriber";
    case PeerRole::kObserver:
      return "observer";
  }
  return "unknown-role";
}

Result<FrameHeader> DecodeFrameHeader(ByteView header, uint32_t max_payload) {
  if (header.size() != kFrameHeaderSize) {
    return InvalidArgument("frame header is " + std::to_string(header.size()) + " bytes, expected " +
                           std::to_string(kFrameHeaderSize));
  }
  FrameHeader h;
  h.payload_size = static_cast<uint32_t>(LoadLe(header.subspan(0, 4)));
  uint8_t type = std::to_integer<uint8_t>(header[4]);
  h.seq = LoadLe(header.subspan(5, 8));
  if (type == 0 || type > kMaxMessageType) {
    return InvalidArgument("frame has unknown message type " + std::to_string(type));
  }
  h.type = static_cast<MessageType>(type);
  if (h.payload_size > max_payload) {
    return InvalidArgument("frame payload of " + std::to_string(h.payload_size) + " bytes exceeds the " +
                           std::to_string(max_payload) + "-byte limit");
  }
  return h;
}

namespace {
Result<Digest> FrameMac(MessageType type, uint64_t seq, ByteView payload, ByteView key) {
  std::array<std::byte, 9> prefix;
  prefix[0] = std::byte{static_cast<uint8_t>(type)};
  StoreLe(seq, std::span(prefix).subspan(1, 8));
  return HmacSha256(key, {prefix, payload});
}
}  // namespace

Status VerifyFrameMac(const FrameHeader& header, ByteView payload, ByteView mac, ByteView key) {
  WP_ASSIGN_OR_RETURN(Digest expected, FrameMac(header.type, header.seq, payload, key));
  if (!ConstantTimeEqual(expected, mac)) {
    return PermissionDenied("frame " + std::string(MessageTypeName(header.type)) + " #" +
                            std::to_string(header.seq) + " has a wrong MAC (tampered, or a different key)");
  }
  return Status::Ok();
}

Result<Bytes> EncodeFrame(MessageType type, uint64_t seq, ByteView payload, ByteView key) {
  if (payload.size() > UINT32_MAX) return InvalidArgument("frame payload over 4 GiB");
  WP_ASSIGN_OR_RETURN(Digest mac, FrameMac(type, seq, payload, key));
  Bytes out(kFrameHeaderSize + payload.size() + kFrameMacSize);
  StoreLe(payload.size(), std::span(out).subspan(0, 4));
  out[4] = std::byte{static_cast<uint8_t>(type)};
  StoreLe(seq, std::span(out).subspan(5, 8));
  if (!payload.empty()) std::memcpy(out.data() + kFrameHeaderSize, payload.data(), payload.size());
  std::memcpy(out.data() + kFrameHeaderSize + payload.size(), mac.data(), mac.size());
  return out;
}

Result<Frame> DecodeFrame(ByteView bytes, ByteView key, uint64_t expected_seq, uint32_t max_payload) {
  if (bytes.size() < kFrameHeaderSize) return InvalidArgument("frame truncated in its header");
  WP_ASSIGN_OR_RETURN(FrameHeader h, DecodeFrameHeader(bytes.first(kFrameHeaderSize), max_payload));
  const size_t total = kFrameHeaderSize + size_t{h.payload_size} + kFrameMacSize;
  if (bytes.size() < total)
    return InvalidArgument("frame truncated: " + std::to_string(bytes.size()) + " of " +
                           std::to_string(total) + " bytes");
  if (bytes.size() > total)
    return InvalidArgument("frame followed by " + std::to_string(bytes.size() - total) + " trailing bytes");
  ByteView payload = bytes.subspan(kFrameHeaderSize, h.payload_size);
  WP_RETURN_IF_ERROR(VerifyFrameMac(h, payload, bytes.subspan(total - kFrameMacSize), key));
  // The MAC covers seq, so a frame with the wrong number is a replay or a reorder, not corruption.
  if (h.seq != expected_seq) {
    return PermissionDenied("frame " + std::string(MessageTypeName(h.type)) + " has sequence number " +
                            std::to_string(h.seq) + ", expected " + std::to_string(expected_seq) +
                            " (replayed or reordered)");
  }
  return Frame{h.type, h.seq, Bytes(payload.begin(), payload.end())};
}

}  // namespace weightport
