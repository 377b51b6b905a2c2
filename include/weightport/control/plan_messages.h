// Running a Plan across processes (engine/session: reshard, plan sessions): rank -> coordinator
// PlanJoin, coordinator -> every rank PlanPeers, source -> coordinator PlanReady(v); then
// UpdateBegin, ChunksVerified / UpdateFailed, Commit / Abort, Committed as for a publisher's versions
// (version_messages.h). Before any plan exists, the rendezvous: LayoutOffer from each rank,
// PlanAssign back.
//
// Thread-safety: plain structs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "weightport/control/protocol.h"
#include "weightport/core/status.h"

namespace weightport {

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

// A source rank has written and published (hashed) `version`, with the digests of its shards that
// other sources hold too (PlanRank::replica_digests), for the coordinator to compare.
inline constexpr size_t kMaxReplicaDigests = 1u << 20;
struct PlanReadyMsg {
  static constexpr MessageType kType = MessageType::kPlanReady;
  uint64_t version = 0;
  std::vector<std::pair<uint32_t, uint64_t>> replica_digests;  // (shard index, digest)
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

// The coordinator's answer to every offer once all are in: that rank's part of the plan
// (EncodeRankPlan, engine/rank/rank_plan.h), never the whole plan.
struct PlanAssignMsg {
  static constexpr MessageType kType = MessageType::kPlanAssign;
  std::string rank_plan;
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

// Keys per version (PlanCoordinatorOptions::rotate_keys): `version` was decided; every rank
// moves to a fresh transport, answers with a PlanJoin carrying its new address and key, and gets
// the new peer table (PlanPeers) before the next version begins.
struct RekeyMsg {
  static constexpr MessageType kType = MessageType::kRekey;
  uint64_t version = 0;
  Bytes Encode() const;
  static Result<RekeyMsg> Decode(ByteView payload);
  friend bool operator==(const RekeyMsg&, const RekeyMsg&) = default;
};

// Rollback (PlanPublisher::Rollback): a source asks the coordinator to make `version`, committed
// before and kept by the destinations (PlanRankOptions::keep_versions), live again; the coordinator
// then tells every destination to restore it (PlanRank::Restore). They answer ChunksVerified or
// UpdateFailed, and hear Commit(version) or Abort(version) like a version's.
struct RollbackMsg {
  static constexpr MessageType kType = MessageType::kRollback;
  uint64_t version = 0;
  Bytes Encode() const;
  static Result<RollbackMsg> Decode(ByteView payload);
  friend bool operator==(const RollbackMsg&, const RollbackMsg&) = default;
};

}  // namespace weightport
