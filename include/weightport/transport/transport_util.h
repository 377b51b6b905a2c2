// Small helpers every transport backend shares: range checks and their error text, errors that
// name the peer, and the little-endian words of packed keys and addresses.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "weightport/core/status.h"
#include "weightport/transport/transport.h"

namespace weightport::transport_util {

// [offset, offset + length) within [0, size), without overflow.
inline bool InBounds(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

inline std::string RangeText(uint64_t offset, uint64_t length, uint64_t size) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(length) + ") exceeds region of " +
         std::to_string(size) + " bytes";
}

inline Status PeerError(StatusCode code, const std::string& peer, const std::string& what) {
  return Status(code, "peer '" + peer + "': " + what);
}

inline void PutLe64(Bytes& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

// The word at `at`; the caller has checked that in holds at + 8 bytes.
inline uint64_t GetLe64(std::span<const std::byte> in, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[at + i]) << (8 * i);
  return v;
}

}  // namespace weightport::transport_util
