// The message of federated rounds (engine/fed: fed_server.h, fed_client.h): one message type, its kind
// in the first byte. Every field travels in every kind (a fixed layout, strictly decoded); each kind
// reads the ones it names.
//
// Thread-safety: plain structs.
#pragma once

#include <cstdint>

#include "weightport/control/protocol.h"
#include "weightport/core/status.h"

namespace weightport {

enum class FedKind : uint8_t {
  kJoin = 1,         // client -> server: version = the global version it holds (kFedHoldsNothing: none)
  kRoundBegin = 2,   // server -> client: round, version, elements, chunk_elements, deadline_ms
  kModelChunk = 3,   // server -> client: round, chunk, compressed, raw_bytes, data (bf16 bytes)
  kModelEnd = 4,     // server -> client: round, version, hash (xxh3 of the whole bf16 model)
  kUpdateBegin = 5,  // client -> server: round, value = samples
  kUpdateChunk = 6,  // client -> server: round, chunk, encoding, value = scale, compressed, raw_bytes, data
  kUpdateEnd = 7,    // client -> server: round
};
inline constexpr uint8_t kMaxFedKind = 7;
// FedMsg::version of a join from a client that holds no global version.
inline constexpr uint64_t kFedHoldsNothing = ~uint64_t{0};
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

}  // namespace weightport
