// The control-plane wire protocol: framing, the message types and the limits every payload shares.
// The payloads are declared by family, each with its codec beside it:
//   handshake.h         Hello, Challenge, Proof, Welcome, Refused, Heartbeat, Bye
//   version_messages.h  UpdateBegin, ChunksVerified, UpdateFailed, Commit, Committed, Abort
//   pubsub_messages.h   Manifest, RegionKeys, Placement
//   plan_messages.h     PlanJoin, PlanPeers, PlanReady, LayoutOffer, PlanAssign, PeerLost, Rekey,
//                       Rollback
//   fed_messages.h      Fed
// validate_payload.h checks a payload of any type.
//
// Frame (all integers little-endian):
//   u32 payload_size | u8 type | u64 seq | payload[payload_size] | mac[32]
//   mac = HMAC-SHA256(key, type || seq || payload)
// Before the handshake completes, frames are MACed with kHandshakeKey (all zeros: an integrity check
// only; authenticity comes from the proofs inside). After it, with the session key. Each direction
// numbers its frames 0, 1, 2, ... across the handshake; a receiver accepts only the next number, so
// replayed, dropped or reordered frames are refused. payload_size is checked against a maximum before
// any buffer for the payload is allocated (kMaxHandshakePayload until the handshake completes).
//
// Payload fields: integers are fixed-width little-endian; strings and byte strings are a u32 length
// followed by the bytes. Each payload type has kType, Encode() and a strict static Decode().
// Decoders are strict: truncation, trailing bytes, out-of-range enums and oversize strings are
// InvalidArgument, and they never read out of bounds (fuzzed by control_codec_fuzz). Encoders do not
// validate; Decode(Encode(m)) == m for every valid m.
//
// Thread-safety: pure functions and plain structs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/control/auth.h"
#include "weightport/core/status.h"

namespace weightport {

using Bytes = std::vector<std::byte>;
using ByteView = std::span<const std::byte>;

enum class MessageType : uint8_t {
  kHello = 1,
  kChallenge = 2,
  kProof = 3,
  kWelcome = 4,
  kRefused = 5,
  kManifest = 6,
  kRegionKeys = 7,
  kPlacement = 8,
  kUpdateBegin = 9,
  kChunksVerified = 10,
  kUpdateFailed = 11,
  kCommit = 12,
  kAbort = 13,
  kHeartbeat = 14,
  kBye = 15,
  kCommitted = 16,
  kPlanJoin = 17,
  kPlanPeers = 18,
  kPlanReady = 19,
  kLayoutOffer = 20,
  kPlanAssign = 21,
  kPeerLost = 22,
  kFed = 23,
  kRekey = 24,
  kRollback = 25,
  kStagingReady = 26,
};
inline constexpr uint8_t kMaxMessageType = 26;
std::string_view MessageTypeName(MessageType type);  // "Hello"; "Unknown" outside the enum

enum class PeerRole : uint8_t { kPublisher = 1, kSubscriber = 2, kObserver = 3 };
std::string_view PeerRoleName(PeerRole role);  // "publisher"

inline constexpr size_t kFrameHeaderSize = 4 + 1 + 8;
inline constexpr size_t kFrameMacSize = kDigestSize;
inline constexpr uint32_t kDefaultMaxPayload = 64u << 20;
// Before the handshake completes, the bound on every frame (the largest handshake message is a
// Refused with its reason): an unauthenticated peer cannot make the other end allocate more.
inline constexpr uint32_t kMaxHandshakePayload = 8 * 1024;
inline constexpr size_t kMaxNameSize = 128;     // peer names: printable ASCII, non-empty
inline constexpr size_t kMaxReasonSize = 4096;  // Refused / UpdateFailed / Abort reasons
inline constexpr Digest kHandshakeKey{};

struct FrameHeader {
  uint32_t payload_size = 0;
  MessageType type = MessageType::kHeartbeat;
  uint64_t seq = 0;
};

struct Frame {
  MessageType type = MessageType::kHeartbeat;
  uint64_t seq = 0;
  Bytes payload;
};

// Parses the fixed header; refuses an unknown type or payload_size > max_payload.
Result<FrameHeader> DecodeFrameHeader(ByteView header, uint32_t max_payload);
// Checks the MAC of a frame whose header has been parsed; PermissionDenied when it does not match.
Status VerifyFrameMac(const FrameHeader& header, ByteView payload, ByteView mac, ByteView key);
// Header, payload and MAC as one buffer.
Result<Bytes> EncodeFrame(MessageType type, uint64_t seq, ByteView payload, ByteView key);
// Decodes exactly one whole frame (no trailing bytes): header, bound, MAC, then seq == expected_seq.
Result<Frame> DecodeFrame(ByteView bytes, ByteView key, uint64_t expected_seq,
                          uint32_t max_payload = kDefaultMaxPayload);

}  // namespace weightport
