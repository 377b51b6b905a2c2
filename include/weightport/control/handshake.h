// The control channel's own messages (control/channel.h): the mutual handshake that opens a
// connection (Hello, Challenge, Proof, Welcome; auth.h computes the proofs), Refused, which tells a
// peer why it is turned away, then Heartbeat and Bye.
//
// Thread-safety: plain structs.
#pragma once

#include <string>

#include "weightport/control/auth.h"
#include "weightport/control/protocol.h"
#include "weightport/core/status.h"

namespace weightport {

struct HelloMsg {
  static constexpr MessageType kType = MessageType::kHello;
  PeerRole role = PeerRole::kObserver;
  std::string name;
  Bytes Encode() const;
  static Result<HelloMsg> Decode(ByteView payload);
  friend bool operator==(const HelloMsg&, const HelloMsg&) = default;
};

struct ChallengeMsg {
  static constexpr MessageType kType = MessageType::kChallenge;
  Nonce server_nonce{};
  Bytes Encode() const;
  static Result<ChallengeMsg> Decode(ByteView payload);
  friend bool operator==(const ChallengeMsg&, const ChallengeMsg&) = default;
};

struct ProofMsg {
  static constexpr MessageType kType = MessageType::kProof;
  Nonce client_nonce{};
  Digest proof{};
  Bytes Encode() const;
  static Result<ProofMsg> Decode(ByteView payload);
  friend bool operator==(const ProofMsg&, const ProofMsg&) = default;
};

struct WelcomeMsg {
  static constexpr MessageType kType = MessageType::kWelcome;
  std::string server_name;
  Digest server_proof{};
  Bytes Encode() const;
  static Result<WelcomeMsg> Decode(ByteView payload);
  friend bool operator==(const WelcomeMsg&, const WelcomeMsg&) = default;
};

struct RefusedMsg {
  static constexpr MessageType kType = MessageType::kRefused;
  std::string reason;
  Bytes Encode() const;
  static Result<RefusedMsg> Decode(ByteView payload);
  friend bool operator==(const RefusedMsg&, const RefusedMsg&) = default;
};

struct HeartbeatMsg {
  static constexpr MessageType kType = MessageType::kHeartbeat;
  Bytes Encode() const { return {}; }
  static Result<HeartbeatMsg> Decode(ByteView payload);
  friend bool operator==(const HeartbeatMsg&, const HeartbeatMsg&) = default;
};

struct ByeMsg {
  static constexpr MessageType kType = MessageType::kBye;
  Bytes Encode() const { return {}; }
  static Result<ByeMsg> Decode(ByteView payload);
  friend bool operator==(const ByeMsg&, const ByeMsg&) = default;
};

}  // namespace weightport
