// Byte layouts the UCX transport puts on the wire: its address, the backend part of a RemoteKey,
// and the header of each control message. All integers little-endian.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "weightport/transport/transport.h"

namespace weightport::ucx {

// The Active Message id of control messages.
constexpr unsigned kMessageId = 1;

// Values of a transport's liveness word (see UcxTransport::Init).
constexpr uint64_t kLivenessAlive = 1;
constexpr uint64_t kLivenessClosed = 2;

// Transport::address(): who the transport is (a random 64-bit id), where its liveness word lives
// (see UcxTransport), and the ucp worker address.
struct WireAddress {
  uint64_t transport_id = 0;
  uint64_t liveness_address = 0;
  Bytes liveness_rkey;  // packed ucp rkey of the liveness word; empty if none
  Bytes worker_address;
};
Bytes EncodeAddress(const WireAddress& address);
std::optional<WireAddress> DecodeAddress(std::span<const std::byte> bytes);

// RemoteKey::packed: the owning transport and region, then the packed ucp rkey. The owner lets a
// connection refuse a key of another transport before UCX would write to a wrong address.
struct WireKey {
  uint64_t owner_id = 0;
  uint64_t region_id = 0;
  std::span<const std::byte> ucp_rkey;  // points into the decoded bytes
};
Bytes EncodeKey(uint64_t owner_id, uint64_t region_id, std::span<const std::byte> ucp_rkey);
std::optional<WireKey> DecodeKey(std::span<const std::byte> bytes);

// Active Message header of a control message: the sender's name, and the sender connection's
// stream id and sequence number, so the receiver delivers each stream's messages in order even when
// a large one (rendezvous) arrives after a later small one.
struct WireHeader {
  std::string from;
  uint64_t stream = 0;
  uint64_t seq = 0;
};
constexpr size_t kHeaderFixedBytes = 1 + 2 + 8 + 8;
constexpr size_t kMaxNameBytes = 1024;
Bytes EncodeHeader(std::string_view from, uint64_t stream, uint64_t seq);
std::optional<WireHeader> DecodeHeader(std::span<const std::byte> bytes);

}  // namespace weightport::ucx
