// The handshake's and the channel's own payloads (handshake.h).
#include "weightport/control/handshake.h"

#include "codec_io.h"
#include "weightport/core/printable.h"

namespace weightport {

using control_internal::DecodeString;
using control_internal::EncodeString;
using control_internal::Reader;
using control_internal::Writer;

Bytes HelloMsg::Encode() const {
  Writer w;
  w.U8(static_cast<uint8_t>(role));
  w.Str(name);
  return w.Take();
}
Result<HelloMsg> HelloMsg::Decode(ByteView payload) {
  Reader r(payload, "Hello");
  HelloMsg m;
  WP_ASSIGN_OR_RETURN(uint64_t role, r.Int(1, "role"));
  if (role < 1 || role > 3) return InvalidArgument("Hello: unknown role " + std::to_string(role));
  m.role = static_cast<PeerRole>(role);
  WP_ASSIGN_OR_RETURN(m.name, r.Name("name"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes ChallengeMsg::Encode() const {
  Writer w;
  w.Raw(server_nonce);
  return w.Take();
}
Result<ChallengeMsg> ChallengeMsg::Decode(ByteView payload) {
  Reader r(payload, "Challenge");
  ChallengeMsg m;
  WP_RETURN_IF_ERROR(r.Fixed(m.server_nonce, "server nonce"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes ProofMsg::Encode() const {
  Writer w;
  w.Raw(client_nonce);
  w.Raw(proof);
  return w.Take();
}
Result<ProofMsg> ProofMsg::Decode(ByteView payload) {
  Reader r(payload, "Proof");
  ProofMsg m;
  WP_RETURN_IF_ERROR(r.Fixed(m.client_nonce, "client nonce"));
  WP_RETURN_IF_ERROR(r.Fixed(m.proof, "proof"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes WelcomeMsg::Encode() const {
  Writer w;
  w.Str(server_name);
  w.Raw(server_proof);
  return w.Take();
}
Result<WelcomeMsg> WelcomeMsg::Decode(ByteView payload) {
  Reader r(payload, "Welcome");
  WelcomeMsg m;
  WP_ASSIGN_OR_RETURN(m.server_name, r.Name("server name"));
  WP_RETURN_IF_ERROR(r.Fixed(m.server_proof, "server proof"));
  WP_RETURN_IF_ERROR(r.Done());
  return m;
}

Bytes RefusedMsg::Encode() const { return EncodeString(reason); }
Result<RefusedMsg> RefusedMsg::Decode(ByteView payload) {
  WP_ASSIGN_OR_RETURN(std::string reason, DecodeString(payload, "Refused", "reason", kMaxReasonSize));
  // A refusal may come before the peer has proved the secret: its text reaches logs escaped, cut
  // so that even all escapes (4 bytes each) fit a reason's bound when it is passed on.
  return RefusedMsg{Printable(reason, (kMaxReasonSize - 3) / 4)};
}

Result<HeartbeatMsg> HeartbeatMsg::Decode(ByteView payload) {
  WP_RETURN_IF_ERROR(Reader(payload, "Heartbeat").Done());
  return HeartbeatMsg{};
}
Result<ByeMsg> ByeMsg::Decode(ByteView payload) {
  WP_RETURN_IF_ERROR(Reader(payload, "Bye").Done());
  return ByeMsg{};
}

}  // namespace weightport
