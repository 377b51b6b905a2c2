// What publish/subscribe (engine/pubsub) adds to the version messages: the manifest a publisher
// is about to publish, the regions its peers fetch from, and what a subscriber wants.
//
// Thread-safety: plain structs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weightport/control/protocol.h"
#include "weightport/core/status.h"

namespace weightport {

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

// A subscriber has its staging memory for the publisher's regions ready (mapped, its pages entered,
// registered): a version held for subscribers (UpdateBeginMsg's min_subscribers) waits for this, so
// that the first version moves bytes rather than waiting for the kernel to zero-fill pages.
struct StagingReadyMsg {
  static constexpr MessageType kType = MessageType::kStagingReady;
  uint64_t bytes = 0;       // staging memory prepared (every buffer of its store)
  uint64_t prepare_ns = 0;  // how long preparing it took
  Bytes Encode() const;
  static Result<StagingReadyMsg> Decode(ByteView payload);
  friend bool operator==(const StagingReadyMsg&, const StagingReadyMsg&) = default;
};

}  // namespace weightport
