// The payloads publish/subscribe adds (pubsub_messages.h).
#include "weightport/control/pubsub_messages.h"

#include <string>

#include "codec_io.h"

namespace weightport {

using control_internal::DecodeString;
using control_internal::EncodeString;
using control_internal::Reader;
using control_internal::Writer;

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

Bytes StagingReadyMsg::Encode() const {
  Writer w;
  w.U64(bytes);
  w.U64(prepare_ns);
  return w.Take();
}
Result<StagingReadyMsg> StagingReadyMsg::Decode(ByteView payload) {
  Reader r(payload, "StagingReady");
  StagingReadyMsg m;
  WP_ASSIGN_OR_RETURN(m.bytes, r.U64("bytes"));
  WP_ASSIGN_OR_RETURN(m.prepare_ns, r.U64("prepare"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

}  // namespace weightport
