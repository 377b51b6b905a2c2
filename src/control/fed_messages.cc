// The payload of federated rounds (fed_messages.h).
#include "weightport/control/fed_messages.h"

#include <cstring>

#include "codec_io.h"

namespace weightport {

using control_internal::Reader;
using control_internal::Writer;

Bytes FedMsg::Encode() const {
  Writer w;
  w.U8(static_cast<uint8_t>(kind));
  w.U64(round);
  w.U64(version);
  w.U64(elements);
  w.U32(chunk_elements);
  w.U32(chunk);
  w.U64(deadline_ms);
  uint64_t bits;
  std::memcpy(&bits, &value, 8);
  w.U64(bits);
  w.U64(hash);
  w.U8(encoding);
  w.U8(compressed);
  w.U32(raw_bytes);
  w.Blob(data);
  return w.Take();
}
Result<FedMsg> FedMsg::Decode(ByteView payload) {
  Reader r(payload, "Fed");
  FedMsg m;
  WP_ASSIGN_OR_RETURN(uint64_t kind, r.Int(1, "kind"));
  if (kind == 0 || kind > kMaxFedKind) return InvalidArgument("Fed: unknown kind " + std::to_string(kind));
  m.kind = static_cast<FedKind>(kind);
  WP_ASSIGN_OR_RETURN(m.round, r.U64("round"));
  WP_ASSIGN_OR_RETURN(m.version, r.U64("version"));
  WP_ASSIGN_OR_RETURN(m.elements, r.U64("elements"));
  WP_ASSIGN_OR_RETURN(uint64_t chunk_elements, r.Int(4, "chunk_elements"));
  m.chunk_elements = static_cast<uint32_t>(chunk_elements);
  WP_ASSIGN_OR_RETURN(uint64_t chunk, r.Int(4, "chunk"));
  m.chunk = static_cast<uint32_t>(chunk);
  WP_ASSIGN_OR_RETURN(m.deadline_ms, r.U64("deadline_ms"));
  WP_ASSIGN_OR_RETURN(uint64_t bits, r.U64("value"));
  std::memcpy(&m.value, &bits, 8);
  WP_ASSIGN_OR_RETURN(m.hash, r.U64("hash"));
  WP_ASSIGN_OR_RETURN(uint64_t encoding, r.Int(1, "encoding"));
  m.encoding = static_cast<uint8_t>(encoding);
  WP_ASSIGN_OR_RETURN(uint64_t compressed, r.Int(1, "compressed"));
  if (compressed > 1) return InvalidArgument("Fed: compressed must be 0 or 1");
  m.compressed = static_cast<uint8_t>(compressed);
  WP_ASSIGN_OR_RETURN(uint64_t raw_bytes, r.Int(4, "raw_bytes"));
  m.raw_bytes = static_cast<uint32_t>(raw_bytes);
  WP_ASSIGN_OR_RETURN(m.data, r.BlobCopy("data", kDefaultMaxPayload));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

}  // namespace weightport
