#include <cstring>

#include "weightport/transport/transport.h"
#include "weightport/transport/transport_util.h"

namespace weightport {

using transport_util::GetLe64;
using transport_util::PutLe64;
Bytes RemoteKey::Serialize() const {
  Bytes out;
  out.reserve(24 + packed.size());
  PutLe64(out, address);
  PutLe64(out, length);
  PutLe64(out, packed.size());
  out.insert(out.end(), packed.begin(), packed.end());
  return out;
}

Result<RemoteKey> RemoteKey::Deserialize(std::span<const std::byte> bytes, std::string_view what) {
  if (bytes.size() < 24)
    return InvalidArgument(std::string(what) + ": remote key truncated (" + std::to_string(bytes.size()) +
                           " bytes)");
  RemoteKey key;
  key.address = GetLe64(bytes, 0);
  key.length = GetLe64(bytes, 8);
  const uint64_t packed = GetLe64(bytes, 16);
  if (packed != bytes.size() - 24)
    return InvalidArgument(std::string(what) + ": remote key says " + std::to_string(packed) +
                           " packed bytes, message holds " + std::to_string(bytes.size() - 24));
  if (key.address + key.length < key.address)
    return InvalidArgument(std::string(what) + ": remote key range overflows the address space");
  key.packed.assign(bytes.begin() + 24, bytes.end());
  return key;
}

}  // namespace weightport
