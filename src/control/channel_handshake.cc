// The mutual handshake of the control channel, both halves (channel_handshake.h).
#include "channel_handshake.h"

#include <string>

namespace weightport {

std::unique_ptr<ControlChannel> ControlHandshake::NewServerChannel(int fd, std::string address,
                                                                   ControlOptions options) {
  std::unique_ptr<ControlChannel> ch(new ControlChannel(fd, std::move(address), std::move(options)));
  ch->peer_ = "peer at " + ch->peer_address_;
  return ch;
}

Result<Frame> ControlHandshake::Read(ControlChannel& ch, Clock::time_point deadline) {
  return ch.ReadFrame(kHandshakeKey, deadline);
}

Status ControlHandshake::Check(ControlChannel& ch, const Frame& frame, MessageType type) {
  if (frame.type == MessageType::kRefused) {
    Result<RefusedMsg> refused = RefusedMsg::Decode(frame.payload);
    std::string reason = refused.ok() ? refused->reason : "(malformed Refused message)";
    ch.Log(ch.peer_ + " refused the connection: " + reason);
    ch.Close();
    return PermissionDenied(ch.peer_ + " refused the connection: " + reason);
  }
  if (frame.type != type) {
    return ch.Refuse(InvalidArgument("expected " + std::string(MessageTypeName(type)) + ", got " +
                                     std::string(MessageTypeName(frame.type))),
                     true, kHandshakeKey);
  }
  return Status::Ok();
}

Result<Frame> ControlHandshake::Expect(ControlChannel& ch, MessageType type, Clock::time_point deadline) {
  WP_ASSIGN_OR_RETURN(Frame frame, Read(ch, deadline));
  WP_RETURN_IF_ERROR(Check(ch, frame, type));
  return frame;
}

Result<bool> ControlHandshake::ServerStep(ControlChannel& ch, const Frame& frame, ServerState& state,
                                          std::string_view name, const Secret& secret,
                                          Clock::time_point write_by) {
  if (!state.got_hello) {
    WP_RETURN_IF_ERROR(Check(ch, frame, MessageType::kHello));
    Result<HelloMsg> hello = HelloMsg::Decode(frame.payload);
    if (!hello.ok()) return ch.Refuse(hello.status(), true, kHandshakeKey);
    state.got_hello = true;
    state.hello = std::move(*hello);
    ch.peer_name_ = state.hello.name;
    ch.peer_role_ = state.hello.role;
    ch.peer_ =
        std::string(PeerRoleName(state.hello.role)) + " '" + state.hello.name + "' at " + ch.peer_address_;
    WP_ASSIGN_OR_RETURN(state.server_nonce, RandomNonce());
    WP_RETURN_IF_ERROR(ch.WriteFrame(MessageType::kChallenge, ChallengeMsg{state.server_nonce}.Encode(),
                                     kHandshakeKey, write_by));
    return false;
  }
  WP_RETURN_IF_ERROR(Check(ch, frame, MessageType::kProof));
  Result<ProofMsg> proof = ProofMsg::Decode(frame.payload);
  if (!proof.ok()) return ch.Refuse(proof.status(), true, kHandshakeKey);
  WP_ASSIGN_OR_RETURN(Digest expected,
                      ClientProof(secret, state.server_nonce, proof->client_nonce, state.hello.name));
  if (!ConstantTimeEqual(expected, proof->proof)) {
    return ch.Refuse(PermissionDenied("wrong proof: the peer does not know the shared secret"), true,
                     kHandshakeKey);
  }
  WelcomeMsg welcome{std::string(name), {}};
  WP_ASSIGN_OR_RETURN(welcome.server_proof,
                      ServerProof(secret, proof->client_nonce, state.server_nonce, name));
  WP_RETURN_IF_ERROR(ch.WriteFrame(MessageType::kWelcome, welcome.Encode(), kHandshakeKey, write_by));
  WP_ASSIGN_OR_RETURN(ch.session_key_, SessionKey(secret, state.server_nonce, proof->client_nonce));
  return true;
}

Status ControlHandshake::Client(ControlChannel& ch, std::string_view name, PeerRole role,
                                const Secret& secret, Clock::time_point deadline) {
  WP_RETURN_IF_ERROR(ch.WriteFrame(MessageType::kHello, HelloMsg{role, std::string(name)}.Encode(),
                                   kHandshakeKey, deadline));
  WP_ASSIGN_OR_RETURN(Frame frame, Expect(ch, MessageType::kChallenge, deadline));
  Result<ChallengeMsg> challenge = ChallengeMsg::Decode(frame.payload);
  if (!challenge.ok()) return ch.Refuse(challenge.status(), true, kHandshakeKey);

  ProofMsg proof;
  WP_ASSIGN_OR_RETURN(proof.client_nonce, RandomNonce());
  WP_ASSIGN_OR_RETURN(proof.proof, ClientProof(secret, challenge->server_nonce, proof.client_nonce, name));
  WP_RETURN_IF_ERROR(ch.WriteFrame(MessageType::kProof, proof.Encode(), kHandshakeKey, deadline));
  WP_ASSIGN_OR_RETURN(frame, Expect(ch, MessageType::kWelcome, deadline));
  Result<WelcomeMsg> welcome = WelcomeMsg::Decode(frame.payload);
  if (!welcome.ok()) return ch.Refuse(welcome.status(), true, kHandshakeKey);
  ch.peer_name_ = welcome->server_name;
  ch.peer_ = "coordinator '" + welcome->server_name + "' at " + ch.peer_address_;
  // The server must prove itself too, or a rogue coordinator could feed us plans and manifests.
  WP_ASSIGN_OR_RETURN(Digest expected,
                      ServerProof(secret, proof.client_nonce, challenge->server_nonce, welcome->server_name));
  if (!ConstantTimeEqual(expected, welcome->server_proof)) {
    return ch.Refuse(PermissionDenied("wrong server proof: the coordinator does not know the shared secret"),
                     true, kHandshakeKey);
  }
  WP_ASSIGN_OR_RETURN(ch.session_key_, SessionKey(secret, challenge->server_nonce, proof.client_nonce));
  return Status::Ok();
}

}  // namespace weightport
