#include <cstring>

#include "weightport/control/protocol.h"

namespace weightport {
namespace {

// Appends little-endian fields and length-prefixed strings to a buffer.
class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(std::byte{v}); }
  void U32(uint32_t v) { Int(v, 4); }
  void U64(uint64_t v) { Int(v, 8); }
  void Raw(ByteView bytes) { out_.insert(out_.end(), bytes.begin(), bytes.end()); }
  void Blob(ByteView bytes) {
    U32(static_cast<uint32_t>(bytes.size()));
    Raw(bytes);
  }
  void Str(std::string_view s) { Blob(std::as_bytes(std::span(s.data(), s.size()))); }
  Bytes Take() { return std::move(out_); }

 private:
  void Int(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(std::byte(static_cast<uint8_t>(v >> (8 * i))));
  }
  Bytes out_;
};

// Reads fields from a payload; every read is bounds-checked and names the message and field.
class Reader {
 public:
  Reader(ByteView in, std::string_view msg) : in_(in), msg_(msg) {}

  Status Need(size_t n, std::string_view field) const {
    if (in_.size() - pos_ < n) {
      return InvalidArgument(std::string(msg_) + ": truncated at " + std::string(field) + " (needs " +
                             std::to_string(n) + " bytes at offset " + std::to_string(pos_) + ", " +
                             std::to_string(in_.size() - pos_) + " left)");
    }
    return Status::Ok();
  }
  Result<uint64_t> Int(int n, std::string_view field) {
    WP_RETURN_IF_ERROR(Need(static_cast<size_t>(n), field));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= static_cast<uint64_t>(std::to_integer<uint8_t>(in_[pos_ + i])) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  Result<uint64_t> U64(std::string_view field) { return Int(8, field); }
  template <size_t N>
  Status Fixed(std::array<std::byte, N>& out, std::string_view field) {
    WP_RETURN_IF_ERROR(Need(N, field));
    std::memcpy(out.data(), in_.data() + pos_, N);
    pos_ += N;
    return Status::Ok();
  }
  // A u32 length then that many bytes, at most max_size.
  Result<ByteView> Blob(std::string_view field, size_t max_size) {
    WP_ASSIGN_OR_RETURN(uint64_t size, Int(4, field));
    if (size > max_size) {
      return InvalidArgument(std::string(msg_) + ": " + std::string(field) + " is " + std::to_string(size) +
                             " bytes, at most " + std::to_string(max_size) + " allowed");
    }
    WP_RETURN_IF_ERROR(Need(size, field));
    ByteView out = in_.subspan(pos_, size);
    pos_ += size;
    return out;
  }
  Result<Bytes> BlobCopy(std::string_view field, size_t max_size) {
    WP_ASSIGN_OR_RETURN(ByteView v, Blob(field, max_size));
    return Bytes(v.begin(), v.end());
  }
  Result<std::string> Str(std::string_view field, size_t max_size) {
    WP_ASSIGN_OR_RETURN(ByteView v, Blob(field, max_size));
    return std::string(reinterpret_cast<const char*>(v.data()), v.size());
  }
  // Peer names end up in logs and error messages: printable ASCII only, so a peer cannot forge lines.
  Result<std::string> Name(std::string_view field) {
    WP_ASSIGN_OR_RETURN(std::string name, Printable(field, kMaxNameSize));
    if (name.empty()) return InvalidArgument(std::string(msg_) + ": " + std::string(field) + " is empty");
    return name;
  }
  Result<std::string> Printable(std::string_view field, size_t max_size) {
    WP_ASSIGN_OR_RETURN(std::string text, Str(field, max_size));
    for (char c : text) {
      if (c < 0x20 || c > 0x7e) {
        return InvalidArgument(std::string(msg_) + ": " + std::string(field) +
                               " contains a non-printable byte");
      }
    }
    return text;
  }
  size_t remaining() const { return in_.size() - pos_; }
  Status Done() const {
    if (pos_ != in_.size()) {
      return InvalidArgument(std::string(msg_) + ": " + std::to_string(in_.size() - pos_) +
                             " trailing bytes after the last field");
    }
    return Status::Ok();
  }

 private:
  ByteView in_;
  size_t pos_ = 0;
  std::string_view msg_;
};

}  // namespace

// ---- payloads -----------------------------------------------------------------------------------

Bytes HelloMsg::Encode() const {
  Writer w;
  w.U8(static_cast<uint8_t>(role));
  w.Str(name);
  return w.Take();
}
Result<HelloMsg> HelloMsg::Decode(ByteView payload) {
  Reader r(payload, "Hello");
  HelloMsg m;
  WP_ASSIGN_OR_RETURN(uint64_t role, r.Int(1, "role"));
  if (role < 1 || role > 3) return InvalidArgument("Hello: unknown role " + std::to_string(role));
  m.role = static_cast<PeerRole>(role);
  WP_ASSIGN_OR_RETURN(m.name, r.Name("name"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes ChallengeMsg::Encode() const {
  Writer w;
  w.Raw(server_nonce);
  return w.Take();
}
Result<ChallengeMsg> ChallengeMsg::Decode(ByteView payload) {
  Reader r(payload, "Challenge");
  ChallengeMsg m;
  WP_RETURN_IF_ERROR(r.Fixed(m.server_nonce, "server nonce"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes ProofMsg::Encode() const {
  Writer w;
  w.Raw(client_nonce);
  w.Raw(proof);
  return w.Take();
}
Result<ProofMsg> ProofMsg::Decode(ByteView payload) {
  Reader r(payload, "Proof");
  ProofMsg m;
  WP_RETURN_IF_ERROR(r.Fixed(m.client_nonce, "client nonce"));
  WP_RETURN_IF_ERROR(r.Fixed(m.proof, "proof"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes WelcomeMsg::Encode() const {
  Writer w;
  w.Str(server_name);
  w.Raw(server_proof);
  return w.Take();
}
Result<WelcomeMsg> WelcomeMsg::Decode(ByteView payload) {
  Reader r(payload, "Welcome");
  WelcomeMsg m;
  WP_ASSIGN_OR_RETURN(m.server_name, r.Name("server name"));
  WP_RETURN_IF_ERROR(r.Fixed(m.server_proof, "server proof"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

namespace {
// The shared shape of messages that are one string.
Bytes EncodeString(std::string_view s) {
  Writer w;
  w.Str(s);
  return w.Take();
}
Result<std::string> DecodeString(ByteView payload, std::string_view msg, std::string_view field, size_t max) {
  Reader r(payload, msg);
  WP_ASSIGN_OR_RETURN(std::string s, r.Str(field, max));
  WP_RETURN_IF_ERROR(r.Done());
  return s;
}
// A version followed by a u64 or a reason string.
Result<uint64_t> DecodeVersionOnly(ByteView payload, std::string_view msg) {
  Reader r(payload, msg);
  WP_ASSIGN_OR_RETURN(uint64_t version, r.U64("version"));
  WP_RETURN_IF_ERROR(r.Done());
  return version;
}
}  // namespace

Bytes RefusedMsg::Encode() const { return EncodeString(reason); }
Result<RefusedMsg> RefusedMsg::Decode(ByteView payload) {
  WP_ASSIGN_OR_RETURN(std::string reason, DecodeString(payload, "Refused", "reason", kMaxReasonSize));
  return RefusedMsg{std::move(reason)};
}

Bytes ManifestMsg::Encode() const { return EncodeString(json); }
Result<ManifestMsg> ManifestMsg::Decode(ByteView payload) {
  WP_ASSIGN_OR_RETURN(std::string json, DecodeString(payload, "Manifest", "json", payload.size()));
  return ManifestMsg{std::move(json)};
}

Bytes PlacementMsg::Encode() const { return EncodeString(json); }
Result<PlacementMsg> PlacementMsg::Decode(ByteView payload) {
  WP_ASSIGN_OR_RETURN(std::string json, DecodeString(payload, "Placement", "json", payload.size()));
  return PlacementMsg{std::move(json)};
}

Bytes RegionKeysMsg::Encode() const {
  Writer w;
  w.Blob(transport_address);
  w.U32(static_cast<uint32_t>(regions.size()));
  for (const Region& region : regions) {
    w.U64(region.region_id);
    w.Blob(region.remote_key);
  }
  return w.Take();
}
Result<RegionKeysMsg> RegionKeysMsg::Decode(ByteView payload) {
  Reader r(payload, "RegionKeys");
  RegionKeysMsg m;
  WP_ASSIGN_OR_RETURN(m.transport_address, r.BlobCopy("transport address", payload.size()));
  WP_ASSIGN_OR_RETURN(uint64_t count, r.Int(4, "region count"));
  // Each region takes at least 12 bytes: a claimed count the payload cannot hold is refused before
  // anything is reserved for it.
  constexpr size_t kMinRegionSize = 8 + 4;
  if (count > r.remaining() / kMinRegionSize) {
    return InvalidArgument("RegionKeys: " + std::to_string(count) + " regions cannot fit in the " +
                           std::to_string(r.remaining()) + " bytes left");
  }
  m.regions.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    Region region;
    WP_ASSIGN_OR_RETURN(region.region_id, r.U64("region id"));
    WP_ASSIGN_OR_RETURN(region.remote_key, r.BlobCopy("remote key", payload.size()));
    m.regions.push_back(std::move(region));
  }
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes UpdateBeginMsg::Encode() const {
  Writer w;
  w.U64(version);
  w.U64(plan_id);
  w.U64(source_region);
  return w.Take();
}
Result<UpdateBeginMsg> UpdateBeginMsg::Decode(ByteView payload) {
  Reader r(payload, "UpdateBegin");
  UpdateBeginMsg m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(m.plan_id, r.U64("plan id"));
  WP_ASSIGN_OR_RETURN(m.source_region, r.U64("source region"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes ChunksVerifiedMsg::Encode() const {
  Writer w;
  w.U64(version);
  w.U64(count);
  w.U64(bytes);
  w.U64(elapsed_ns);
  w.U64(retries);
  return w.Take();
}
Result<ChunksVerifiedMsg> ChunksVerifiedMsg::Decode(ByteView payload) {
  Reader r(payload, "ChunksVerified");
  ChunksVerifiedMsg m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(m.count, r.U64("count"));
  WP_ASSIGN_OR_RETURN(m.bytes, r.U64("bytes"));
  WP_ASSIGN_OR_RETURN(m.elapsed_ns, r.U64("elapsed"));
  WP_ASSIGN_OR_RETURN(m.retries, r.U64("retries"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

namespace {
Bytes EncodeVersionReason(uint64_t version, std::string_view reason) {
  Writer w;
  w.U64(version);
  w.Str(reason);
  return w.Take();
}
template <typename T>
Result<T> DecodeVersionReason(ByteView payload, std::string_view msg) {
  Reader r(payload, msg);
  T m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(m.reason, r.Str("reason", kMaxReasonSize));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}
}  // namespace

Bytes UpdateFailedMsg::Encode() const { return EncodeVersionReason(version, reason); }
Result<UpdateFailedMsg> UpdateFailedMsg::Decode(ByteView payload) {
  return DecodeVersionReason<UpdateFailedMsg>(payload, "UpdateFailed");
}

Bytes AbortMsg::Encode() const { return EncodeVersionReason(version, reason); }
Result<AbortMsg> AbortMsg::Decode(ByteView payload) {
  return DecodeVersionReason<AbortMsg>(payload, "Abort");
}

Bytes CommitMsg::Encode() const {
  Writer w;
  w.U64(version);
  return w.Take();
}
Result<CommitMsg> CommitMsg::Decode(ByteView payload) {
  WP_ASSIGN_OR_RETURN(uint64_t version, DecodeVersionOnly(payload, "Commit"));
  return CommitMsg{version};
}

Bytes CommittedMsg::Encode() const {
  Writer w;
  w.U64(version);
  w.U64(pause_ns);
  return w.Take();
}
Result<CommittedMsg> CommittedMsg::Decode(ByteView payload) {
  Reader r(payload, "Committed");
  CommittedMsg m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(m.pause_ns, r.U64("pause"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Result<HeartbeatMsg> HeartbeatMsg::Decode(ByteView payload) {
  WP_RETURN_IF_ERROR(Reader(payload, "Heartbeat").Done());
  return HeartbeatMsg{};
}
Result<ByeMsg> ByeMsg::Decode(ByteView payload) {
  WP_RETURN_IF_ERROR(Reader(payload, "Bye").Done());
  return ByeMsg{};
}

// ---- plan messages ---------------------------------------------------------------------------------

namespace {
constexpr size_t kMaxAddressSize = 64 << 10;  // transport addresses and packed keys
constexpr size_t kMaxMemoryTypeSize = 64;     // "host", "cuda"
constexpr size_t kMaxPlanPeers = 1 << 16;

Result<uint8_t> ReadSide(Reader& r) {
  WP_ASSIGN_OR_RETURN(uint64_t side, r.Int(1, "side"));
  if (side > 1) return InvalidArgument("plan message: unknown side " + std::to_string(side));
  return static_cast<uint8_t>(side);
}
}  // namespace

Bytes PlanJoinMsg::Encode() const {
  Writer w;
  w.U8(side);
  w.U32(rank);
  w.U64(plan_digest);
  w.Blob(transport_address);
  w.Blob(remote_key);
  w.Blob(device_key);
  w.Str(device_memory);
  return w.Take();
}
Result<PlanJoinMsg> PlanJoinMsg::Decode(ByteView payload) {
  Reader r(payload, "PlanJoin");
  PlanJoinMsg m;
  WP_ASSIGN_OR_RETURN(m.side, ReadSide(r));
  WP_ASSIGN_OR_RETURN(uint64_t rank, r.Int(4, "rank"));
  m.rank = static_cast<uint32_t>(rank);
  WP_ASSIGN_OR_RETURN(m.plan_digest, r.U64("plan_digest"));
  WP_ASSIGN_OR_RETURN(m.transport_address, r.BlobCopy("transport_address", kMaxAddressSize));
  WP_ASSIGN_OR_RETURN(m.remote_key, r.BlobCopy("remote_key", kMaxAddressSize));
  WP_ASSIGN_OR_RETURN(m.device_key, r.BlobCopy("device_key", kMaxAddressSize));
  WP_ASSIGN_OR_RETURN(m.device_memory, r.Printable("device_memory", kMaxMemoryTypeSize));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes PlanPeersMsg::Encode() const {
  Writer w;
  w.U32(static_cast<uint32_t>(peers.size()));
  for (const Peer& p : peers) {
    w.U8(p.side);
    w.U32(p.rank);
    w.Blob(p.transport_address);
    w.Blob(p.remote_key);
    w.Blob(p.device_key);
    w.Str(p.device_memory);
  }
  return w.Take();
}
Result<PlanPeersMsg> PlanPeersMsg::Decode(ByteView payload) {
  Reader r(payload, "PlanPeers");
  PlanPeersMsg m;
  WP_ASSIGN_OR_RETURN(uint64_t count, r.Int(4, "count"));
  if (count > kMaxPlanPeers) return InvalidArgument("PlanPeers: " + std::to_string(count) + " peers");
  for (uint64_t i = 0; i < count; ++i) {
    Peer p;
    WP_ASSIGN_OR_RETURN(p.side, ReadSide(r));
    WP_ASSIGN_OR_RETURN(uint64_t rank, r.Int(4, "rank"));
    p.rank = static_cast<uint32_t>(rank);
    WP_ASSIGN_OR_RETURN(p.transport_address, r.BlobCopy("transport_address", kMaxAddressSize));
    WP_ASSIGN_OR_RETURN(p.remote_key, r.BlobCopy("remote_key", kMaxAddressSize));
    WP_ASSIGN_OR_RETURN(p.device_key, r.BlobCopy("device_key", kMaxAddressSize));
    WP_ASSIGN_OR_RETURN(p.device_memory, r.Printable("device_memory", kMaxMemoryTypeSize));
    m.peers.push_back(std::move(p));
  }
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes PlanReadyMsg::Encode() const {
  Writer w;
  w.U64(version);
  return w.Take();
}
Result<PlanReadyMsg> PlanReadyMsg::Decode(ByteView payload) {
  Reader r(payload, "PlanReady");
  PlanReadyMsg m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes RekeyMsg::Encode() const {
  Writer w;
  w.U64(version);
  return w.Take();
}
Result<RekeyMsg> RekeyMsg::Decode(ByteView payload) {
  Reader r(payload, "Rekey");
  RekeyMsg m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes LayoutOfferMsg::Encode() const {
  Writer w;
  w.U8(side);
  w.U32(rank);
  w.U32(side_ranks);
  w.Str(host);
  w.Str(placement_json);
  return w.Take();
}
Result<LayoutOfferMsg> LayoutOfferMsg::Decode(ByteView payload) {
  Reader r(payload, "LayoutOffer");
  LayoutOfferMsg m;
  WP_ASSIGN_OR_RETURN(m.side, ReadSide(r));
  WP_ASSIGN_OR_RETURN(uint64_t rank, r.Int(4, "rank"));
  m.rank = static_cast<uint32_t>(rank);
  WP_ASSIGN_OR_RETURN(uint64_t side_ranks, r.Int(4, "side_ranks"));
  if (side_ranks == 0 || side_ranks > kMaxPlanPeers || rank >= side_ranks)
    return InvalidArgument("LayoutOffer: rank " + std::to_string(rank) + " of " + std::to_string(side_ranks));
  m.side_ranks = static_cast<uint32_t>(side_ranks);
  WP_ASSIGN_OR_RETURN(m.host, r.Name("host"));
  WP_ASSIGN_OR_RETURN(m.placement_json, r.Str("placement_json", kMaxLayoutJsonSize));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes PlanAssignMsg::Encode() const {
  Writer w;
  w.Str(plan_json);
  return w.Take();
}
Result<PlanAssignMsg> PlanAssignMsg::Decode(ByteView payload) {
  Reader r(payload, "PlanAssign");
  PlanAssignMsg m;
  WP_ASSIGN_OR_RETURN(m.plan_json, r.Str("plan_json", kDefaultMaxPayload));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes PeerLostMsg::Encode() const {
  Writer w;
  w.U8(side);
  w.U32(rank);
  return w.Take();
}
Result<PeerLostMsg> PeerLostMsg::Decode(ByteView payload) {
  Reader r(payload, "PeerLost");
  PeerLostMsg m;
  WP_ASSIGN_OR_RETURN(m.side, ReadSide(r));
  WP_ASSIGN_OR_RETURN(uint64_t rank, r.Int(4, "rank"));
  m.rank = static_cast<uint32_t>(rank);
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes FedMsg::Encode() const {
  Writer w;
  w.U8(static_cast<uint8_t>(kind));
  w.U64(round);
  w.U64(version);
  w.U64(elements);
  w.U32(chunk_elements);
  w.U32(chunk);
  w.U64(deadline_ms);
  uint64_t bits;
  std::memcpy(&bits, &value, 8);
  w.U64(bits);
  w.U64(hash);
  w.U8(encoding);
  w.U8(compressed);
  w.U32(raw_bytes);
  w.Blob(data);
  return w.Take();
}
Result<FedMsg> FedMsg::Decode(ByteView payload) {
  Reader r(payload, "Fed");
  FedMsg m;
  WP_ASSIGN_OR_RETURN(uint64_t kind, r.Int(1, "kind"));
  if (kind == 0 || kind > kMaxFedKind) return InvalidArgument("Fed: unknown kind " + std::to_string(kind));
  m.kind = static_cast<FedKind>(kind);
  WP_ASSIGN_OR_RETURN(m.round, r.U64("round"));
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(m.elements, r.U64("elements"));
  WP_ASSIGN_OR_RETURN(uint64_t chunk_elements, r.Int(4, "chunk_elements"));
  m.chunk_elements = static_cast<uint32_t>(chunk_elements);
  WP_ASSIGN_OR_RETURN(uint64_t chunk, r.Int(4, "chunk"));
  m.chunk = static_cast<uint32_t>(chunk);
  WP_ASSIGN_OR_RETURN(m.deadline_ms, r.U64("deadline_ms"));
  WP_ASSIGN_OR_RETURN(uint64_t bits, r.U64("value"));
  std::memcpy(&m.value, &bits, 8);
  WP_ASSIGN_OR_RETURN(m.hash, r.U64("hash"));
  WP_ASSIGN_OR_RETURN(uint64_t encoding, r.Int(1, "encoding"));
  m.encoding = static_cast<uint8_t>(encoding);
  WP_ASSIGN_OR_RETURN(uint64_t compressed, r.Int(1, "compressed"));
  if (compressed > 1) return InvalidArgument("Fed: compressed must be 0 or 1");
  m.compressed = static_cast<uint8_t>(compressed);
  WP_ASSIGN_OR_RETURN(uint64_t raw_bytes, r.Int(4, "raw_bytes"));
  m.raw_bytes = static_cast<uint32_t>(raw_bytes);
  WP_ASSIGN_OR_RETURN(m.data, r.BlobCopy("data", kDefaultMaxPayload));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Status ValidatePayload(MessageType type, ByteView payload) {
  auto check = [&](auto result) { return result.status(); };
  switch (type) {
    case MessageType::kHello:
      return check(HelloMsg::Decode(payload));
    case MessageType::kChallenge:
      return check(ChallengeMsg::Decode(payload));
    case MessageType::kProof:
      return check(ProofMsg::Decode(payload));
    case MessageType::kWelcome:
      return check(WelcomeMsg::Decode(payload));
    case MessageType::kRefused:
      return check(RefusedMsg::Decode(payload));
    case MessageType::kManifest:
      return check(ManifestMsg::Decode(payload));
    case MessageType::kRegionKeys:
      return check(RegionKeysMsg::Decode(payload));
    case MessageType::kPlacement:
      return check(PlacementMsg::Decode(payload));
    case MessageType::kUpdateBegin:
      return check(UpdateBeginMsg::Decode(payload));
    case MessageType::kChunksVerified:
      return check(ChunksVerifiedMsg::Decode(payload));
    case MessageType::kUpdateFailed:
      return check(UpdateFailedMsg::Decode(payload));
    case MessageType::kCommit:
      return check(CommitMsg::Decode(payload));
    case MessageType::kAbort:
      return check(AbortMsg::Decode(payload));
    case MessageType::kHeartbeat:
      return check(HeartbeatMsg::Decode(payload));
    case MessageType::kBye:
      return check(ByeMsg::Decode(payload));
    case MessageType::kCommitted:
      return check(CommittedMsg::Decode(payload));
    case MessageType::kPlanJoin:
      return check(PlanJoinMsg::Decode(payload));
    case MessageType::kPlanPeers:
      return check(PlanPeersMsg::Decode(payload));
    case MessageType::kPlanReady:
      return check(PlanReadyMsg::Decode(payload));
    case MessageType::kLayoutOffer:
      return check(LayoutOfferMsg::Decode(payload));
    case MessageType::kPlanAssign:
      return check(PlanAssignMsg::Decode(payload));
    case MessageType::kPeerLost:
      return check(PeerLostMsg::Decode(payload));
    case MessageType::kFed:
      return check(FedMsg::Decode(payload));
    case MessageType::kRekey:
      return check(RekeyMsg::Decode(payload));
  }
  return InvalidArgument("unknown message type " + std::to_string(static_cast<int>(type)));
}

}  // namespace weightport
