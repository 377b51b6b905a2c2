// The messages of one version's update, shared by publish/subscribe (engine/pubsub) and plan
// sessions (engine/session): UpdateBegin, then ChunksVerified or UpdateFailed from each receiver,
// then Commit or Abort, then Committed from each receiver once it swapped.
//
// Thread-safety: plain structs.
#pragma once

#include <cstdint>
#include <string>

#include "weightport/control/protocol.h"
#include "weightport/core/status.h"

namespace weightport {

// Starts a version: subscribers fetch it from the publisher's region `source_region` (an id from
// its RegionKeys), laid out as the last Manifest describes. From a publisher, `min_subscribers`
// asks the coordinator to hold the version until that many subscribers are connected with their
// staging memory ready (StagingReady), for at most `wait_ms`, and to abort it (naming how many came)
// when they do not; with `wait_ms` 0 it starts at once if that many are connected.
struct UpdateBeginMsg {
  static constexpr MessageType kType = MessageType::kUpdateBegin;
  uint64_t version = 0;
  uint64_t plan_id = 0;
  uint64_t source_region = 0;
  uint64_t min_subscribers = 0;
  uint64_t wait_ms = 0;
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

// `version` is committed; to the publisher, `subscribers` says how many made it live (0: nobody
// was connected, so nobody verified it).
struct CommitMsg {
  static constexpr MessageType kType = MessageType::kCommit;
  uint64_t version = 0;
  uint64_t subscribers = 0;
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

}  // namespace weightport
