// The control-plane wire protocol: framing and the payload of every message type.
//
// Frame (all integers little-endian):
//   u32 payload_size | u8 type | u64 seq | payload[payload_size] | mac[32]
//   mac = HMAC-SHA256(key, type || seq || payload)
// Before the handshake completes, frames are MACed with kHandshakeKey (all zeros: an integrity check
// only; authenticity comes from the proofs inside). After it, with the session key. Each direction
// numbers its frames 0, 1, 2, ... across the handshake; a receiver accepts only the next number, so
// replayed, dropped or reordered frames are refused. payload_size is checked against a maximum before
// any buffer for the payload is allocated.
//
// Payload fields: integers are fixed-width little-endian; strings and byte strings are a u32 length
// followed by the bytes. Decoders are strict: truncation, trailing bytes, out-of-range enums and
// oversize strings are InvalidArgument, and they never read out of bounds (fuzzed by
// control_codec_fuzz). Encoders do not validate; Decode(Encode(m)) == m for every valid m.
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
};
inline constexpr uint8_t kMaxMessageType = 24;
std::string_view MessageTypeName(MessageType type);  // "Hello"; "Unknown" outside the enum

enum class PeerRole : uint8_t { kPublisher = 1, kSubscriber = 2, kObserver = 3 };
std::string_view PeerRoleName(PeerRole role);  // "publisher"

inline constexpr size_t kFrameHeaderSize = 4 + 1 + 8;
inline constexpr size_t kFrameMacSize = kDigestSize;
inline constexpr uint32_t kDefaultMaxPayload = 64u << 20;
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

// ---- payloads. Each has kType, Encode() and a strict static Decode(). ------------------------------

struct HelloMsg {
  static constexpr MessageType kType = MessageType::kHello;
  PeerRole role = PeerRole::kObserver;
  std::string name;
  Bytes Encode() const;
  static Result<HelloMsg> Decode(ByteView payload);
  friend bool operator==(const HelloMsg&, const HelloMsg&) = default;
};

struct ChallengeMsg {
  static constexpr MessageType kType = MessageType::kChallenge;
  Nonce server_nonce{};
  Bytes Encode() const;
  static Result<ChallengeMsg> Decode(ByteView payload);
  friend bool operator==(const ChallengeMsg&, const ChallengeMsg&) = default;
};

struct ProofMsg {
  static constexpr MessageType kType = MessageType::kProof;
  Nonce client_nonce{};
  Digest proof{};
  Bytes Encode() const;
  static Result<ProofMsg> Decode(ByteView payload);
  friend bool operator==(const ProofMsg&, const ProofMsg&) = default;
};

struct WelcomeMsg {
  static constexpr MessageType kType = MessageType::kWelcome;
  std::string server_name;
  Digest server_proof{};
  Bytes Encode() const;
  static Result<WelcomeMsg> Decode(ByteView payload);
  friend bool operator==(const WelcomeMsg&, const WelcomeMsg&) = default;
};

struct RefusedMsg {
  static constexpr MessageType kType = MessageType::kRefused;
  std::string reason;
  Bytes Encode() const;
  static Result<RefusedMsg> Decode(ByteView payload);
  friend bool operator==(const RefusedMsg&, const RefusedMsg&) = default;
};

// Manifest::ToJson() text of the version about to be published; parsed with Manifest::FromJson.
struct ManifestMsg {
  static constexpr MessageType kType = MessageType::kManifest;
  std::string json;
  Bytes Encode() const;
  static Result<ManifestMsg> Decode(ByteView payload);
  friend bool operator==(const ManifestMsg&, const ManifestMsg&) = default;
};

// A peer's transport address and the RemoteKey::Serialize() bytes of each registered region.
struct RegionKeysMsg {
  static constexpr MessageType kType = MessageType::kRegionKeys;
  struct Region {
    uint64_t region_id = 0;
    Bytes remote_key;
    friend bool operator==(const Region&, const Region&) = default;
  };
  Bytes transport_address;
  std::vector<Region> regions;
  Bytes Encode() const;
  static Result<RegionKeysMsg> Decode(ByteView payload);
  friend bool operator==(const RegionKeysMsg&, const RegionKeysMsg&) = default;
};

// What a subscriber wants: JSON {"tensors": ["name", ...]} (absent or empty: the whole model).
// Checked by the coordinator against each version's manifest.
struct PlacementMsg {
  static constexpr MessageType kType = MessageType::kPlacement;
  std::string json;
  Bytes Encode() const;
  static Result<PlacementMsg> Decode(ByteView payload);
  friend bool operator==(const PlacementMsg&, const PlacementMsg&) = default;
};

// Starts a version: subscribers fetch it from the publisher's region `source_region` (an id from
// its RegionKeys), laid out as the last Manifest describes.
struct UpdateBeginMsg {
  static constexpr MessageType kType = MessageType::kUpdateBegin;
  uint64_t version = 0;
  uint64_t plan_id = 0;
  uint64_t source_region = 0;
  Bytes Encode() const;
  static Result<UpdateBeginMsg> Decode(ByteView payload);
  friend bool operator==(const UpdateBeginMsg&, const UpdateBeginMsg&) = default;
};

// A subscriber holds every chunk of `version` it asked for, each checked against the manifest.
struct ChunksVerifiedMsg {
  static constexpr MessageType kType = MessageType::kChunksVerified;
  uint64_t version = 0;
  uint64_t count = 0;       // chunks verified
  uint64_t bytes = 0;       // bytes received
  uint64_t elapsed_ns = 0;  // first Get issued to last chunk verified
  uint64_t retries = 0;     // chunks fetched again (corrupt or failed)
  Bytes Encode() const;
  static Result<ChunksVerifiedMsg> Decode(ByteView payload);
  friend bool operator==(const ChunksVerifiedMsg&, const ChunksVerifiedMsg&) = default;
};

struct UpdateFailedMsg {
  static constexpr MessageType kType = MessageType::kUpdateFailed;
  uint64_t version = 0;
  std::string reason;
  Bytes Encode() const;
  static Result<UpdateFailedMsg> Decode(ByteView payload);
  friend bool operator==(const UpdateFailedMsg&, const UpdateFailedMsg&) = default;
};

struct CommitMsg {
  static constexpr MessageType kType = MessageType::kCommit;
  uint64_t version = 0;
  Bytes Encode() const;
  static Result<CommitMsg> Decode(ByteView payload);
  friend bool operator==(const CommitMsg&, const CommitMsg&) = default;
};

// A subscriber has made `version` live; pause_ns is how long its readers were blocked by the swap.
struct CommittedMsg {
  static constexpr MessageType kType = MessageType::kCommitted;
  uint64_t version = 0;
  uint64_t pause_ns = 0;
  Bytes Encode() const;
  static Result<CommittedMsg> Decode(ByteView payload);
  friend bool operator==(const CommittedMsg&, const CommittedMsg&) = default;
};

struct AbortMsg {
  static constexpr MessageType kType = MessageType::kAbort;
  uint64_t version = 0;
  std::string reason;
  Bytes Encode() const;
  static Result<AbortMsg> Decode(ByteView payload);
  friend bool operator==(const AbortMsg&, const AbortMsg&) = default;
};

struct HeartbeatMsg {
  static constexpr MessageType kType = MessageType::kHeartbeat;
  Bytes Encode() const { return {}; }
  static Result<HeartbeatMsg> Decode(ByteView payload);
  friend bool operator==(const HeartbeatMsg&, const HeartbeatMsg&) = default;
};

struct ByeMsg {
  static constexpr MessageType kType = MessageType::kBye;
  Bytes Encode() const { return {}; }
  static Result<ByeMsg> Decode(ByteView payload);
  friend bool operator==(const ByeMsg&, const ByeMsg&) = default;
};

// ---- running a Plan across processes (reshard): rank -> coordinator PlanJoin, coordinator -> every
// rank PlanPeers, source -> coordinator PlanReady(v); then UpdateBegin, ChunksVerified /
// UpdateFailed, Commit / Abort, Committed as for a publisher's versions. ---------------------------

// A rank of a plan joins: which rank, the Plan::Digest it compiled, and how peers reach it.
struct PlanJoinMsg {
  static constexpr MessageType kType = MessageType::kPlanJoin;
  uint8_t side = 0;  // PlanSide: 0 source, 1 destination
  uint32_t rank = 0;
  uint64_t plan_digest = 0;
  Bytes transport_address;
  Bytes remote_key;           // RemoteKey::Serialize() of the rank's arena
  Bytes device_key;           // of a source's published device copy (PlanPeer::device_key); empty: none
  std::string device_memory;  // its memory type (PlanPeer::device_memory)
  Bytes Encode() const;
  static Result<PlanJoinMsg> Decode(ByteView payload);
  friend bool operator==(const PlanJoinMsg&, const PlanJoinMsg&) = default;
};

// Every rank of the plan, sent by the coordinator once all have joined.
struct PlanPeersMsg {
  static constexpr MessageType kType = MessageType::kPlanPeers;
  struct Peer {
    uint8_t side = 0;
    uint32_t rank = 0;
    Bytes transport_address;
    Bytes remote_key;
    Bytes device_key;  // empty: none
    std::string device_memory;
    friend bool operator==(const Peer&, const Peer&) = default;
  };
  std::vector<Peer> peers;
  Bytes Encode() const;
  static Result<PlanPeersMsg> Decode(ByteView payload);
  friend bool operator==(const PlanPeersMsg&, const PlanPeersMsg&) = default;
};

// A source rank has written and published (hashed) `version`.
struct PlanReadyMsg {
  static constexpr MessageType kType = MessageType::kPlanReady;
  uint64_t version = 0;
  Bytes Encode() const;
  static Result<PlanReadyMsg> Decode(ByteView payload);
  friend bool operator==(const PlanReadyMsg&, const PlanReadyMsg&) = default;
};

// Rendezvous (plan_rendezvous.h): a rank tells the coordinator what it holds before any plan
// exists: its side, rank, how many ranks its side has, the host it runs on and its part of the
// side's Placement (Placement::ToJson text with this rank's shards only).
inline constexpr size_t kMaxLayoutJsonSize = 48u << 20;
struct LayoutOfferMsg {
  static constexpr MessageType kType = MessageType::kLayoutOffer;
  uint8_t side = 0;  // PlanSide: 0 source, 1 destination
  uint32_t rank = 0;
  uint32_t side_ranks = 0;
  std::string host;
  std::string placement_json;
  Bytes Encode() const;
  static Result<LayoutOfferMsg> Decode(ByteView payload);
  friend bool operator==(const LayoutOfferMsg&, const LayoutOfferMsg&) = default;
};

// The coordinator's answer to every offer once all are in: the plan (Plan::ToJson text).
struct PlanAssignMsg {
  static constexpr MessageType kType = MessageType::kPlanAssign;
  std::string plan_json;
  Bytes Encode() const;
  static Result<PlanAssignMsg> Decode(ByteView payload);
  friend bool operator==(const PlanAssignMsg&, const PlanAssignMsg&) = default;
};

// The coordinator lost a rank of the plan (its control connection failed) and goes on without it
// (quorum policy): the ranks that read from it fetch from the sources instead.
struct PeerLostMsg {
  static constexpr MessageType kType = MessageType::kPeerLost;
  uint8_t side = 0;  // PlanSide: 0 source, 1 destination
  uint32_t rank = 0;
  Bytes Encode() const;
  static Result<PeerLostMsg> Decode(ByteView payload);
  friend bool operator==(const PeerLostMsg&, const PeerLostMsg&) = default;
};

// Keys per version (ReshardCoordinatorOptions::rotate_keys): `version` was decided; every rank
// moves to a fresh transport, answers with a PlanJoin carrying its new address and key, and gets
// the new peer table (PlanPeers) before the next version begins.
struct RekeyMsg {
  static constexpr MessageType kType = MessageType::kRekey;
  uint64_t version = 0;
  Bytes Encode() const;
  static Result<RekeyMsg> Decode(ByteView payload);
  friend bool operator==(const RekeyMsg&, const RekeyMsg&) = default;
};

// Federated rounds (fed.h): one message type, its kind in the first byte. Every field travels in
// every kind (a fixed layout, strictly decoded); each kind reads the ones it names.
enum class FedKind : uint8_t {
  kJoin = 1,         // client -> server: version = the global version it holds (0: none)
  kRoundBegin = 2,   // server -> client: round, version, elements, chunk_elements, deadline_ms
  kModelChunk = 3,   // server -> client: round, chunk, compressed, raw_bytes, data (bf16 bytes)
  kModelEnd = 4,     // server -> client: round, version, hash (xxh3 of the whole bf16 model)
  kUpdateBegin = 5,  // client -> server: round, value = samples
  kUpdateChunk = 6,  // client -> server: round, chunk, encoding, value = scale, compressed, raw_bytes, data
  kUpdateEnd = 7,    // client -> server: round
};
inline constexpr uint8_t kMaxFedKind = 7;
struct FedMsg {
  static constexpr MessageType kType = MessageType::kFed;
  FedKind kind = FedKind::kJoin;
  uint64_t round = 0;
  uint64_t version = 0;
  uint64_t elements = 0;
  uint32_t chunk_elements = 0;
  uint32_t chunk = 0;
  uint64_t deadline_ms = 0;
  double value = 0;
  uint64_t hash = 0;
  uint8_t encoding = 0;
  uint8_t compressed = 0;
  uint32_t raw_bytes = 0;
  Bytes data;
  Bytes Encode() const;
  static Result<FedMsg> Decode(ByteView payload);
  friend bool operator==(const FedMsg&, const FedMsg&) = default;
};

// Decodes `payload` as the payload of `type`, discarding the value: InvalidArgument if malformed.
Status ValidatePayload(MessageType type, ByteView payload);

}  // namespace weightport
