#include <cstring>

#include "weightport/transport/transport.h"

namespace weightport {
namespace {

void PutU64(Bytes& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

uint64_t GetU64(std::span<const std::byte> in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

}  // namespace

Bytes RemoteKey::Serialize() const {
  Bytes out;
  out.reserve(24 + packed.size());
  PutU64(out, address);
  PutU64(out, length);
  PutU64(out, packed.size());
  out.insert(out.end(), packed.begin(), packed.end());
  return out;
}

Result<RemoteKey> RemoteKey::Deserialize(std::span<const std::byte> bytes, std::string_view what) {
  if (bytes.size() < 24)
    return InvalidArgument(std::string(what) + ": remote key truncated (" + std::to_string(bytes.size()) +
                           " bytes)");
  RemoteKey key;
  key.address = GetU64(bytes.subspan(0, 8));
  key.length = GetU64(bytes.subspan(8, 8));
  const uint64_t packed = GetU64(bytes.subspan(16, 8));
  if (packed != bytes.size() - 24)
    return InvalidArgument(std::string(what) + ": remote key says " + std::to_string(packed) +
                           " packed bytes, message holds " + std::to_string(bytes.size() - 24));
  if (key.address + key.length < key.address)
    return InvalidArgument(std::string(what) + ": remote key range overflows the address space");
  key.packed.assign(bytes.begin() + 24, bytes.end());
  return key;
}

}  // namespace weightport
