// The payloads of plans run across processes (plan_messages.h).
#include "weightport/control/plan_messages.h"

#include "codec_io.h"

namespace weightport {

using control_internal::Reader;
using control_internal::Writer;

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
  w.U32(static_cast<uint32_t>(replica_digests.size()));
  for (const auto& [shard, digest] : replica_digests) {
    w.U32(shard);
    w.U64(digest);
  }
  return w.Take();
}
Result<PlanReadyMsg> PlanReadyMsg::Decode(ByteView payload) {
  Reader r(payload, "PlanReady");
  PlanReadyMsg m;
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(uint64_t count, r.Int(4, "count"));
  if (count > kMaxReplicaDigests)
    return InvalidArgument("PlanReady: " + std::to_string(count) + " replica digests");
  for (uint64_t i = 0; i < count; ++i) {
    WP_ASSIGN_OR_RETURN(uint64_t shard, r.Int(4, "shard"));
    WP_ASSIGN_OR_RETURN(uint64_t digest, r.U64("digest"));
    m.replica_digests.emplace_back(static_cast<uint32_t>(shard), digest);
  }
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

Bytes RollbackMsg::Encode() const {
  Writer w;
  w.U64(version);
  return w.Take();
}
Result<RollbackMsg> RollbackMsg::Decode(ByteView payload) {
  Reader r(payload, "Rollback");
  RollbackMsg m;
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
  w.Str(rank_plan);
  return w.Take();
}
Result<PlanAssignMsg> PlanAssignMsg::Decode(ByteView payload) {
  Reader r(payload, "PlanAssign");
  PlanAssignMsg m;
  WP_ASSIGN_OR_RETURN(m.rank_plan, r.Str("rank_plan", kDefaultMaxPayload));
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

}  // namespace weightport
