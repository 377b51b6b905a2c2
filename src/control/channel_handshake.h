// The two halves of the control channel's mutual handshake (auth.h), run on a fresh ControlChannel
// before it is handed out. Internal to src/control.
//
// The client half blocks until the handshake is done (ControlChannel::Connect). The server half is
// split into steps, one per frame received, so that ControlListener can run many handshakes side by
// side on one thread without waiting on any of them: Hello (answered with Challenge), then Proof
// (answered with Welcome, after which the channel is authenticated).
#pragma once

#include <chrono>
#include <string_view>

#include "weightport/control/auth.h"
#include "weightport/control/channel.h"
#include "weightport/control/handshake.h"
#include "weightport/core/status.h"

namespace weightport {

struct ControlHandshake {
  using Clock = std::chrono::steady_clock;

  // What the server has learned between its steps.
  struct ServerState {
    bool got_hello = false;
    HelloMsg hello;
    Nonce server_nonce{};
  };

  // A channel on an accepted socket, before its handshake; `peer` names it in errors.
  static std::unique_ptr<ControlChannel> NewServerChannel(int fd, std::string address,
                                                          ControlOptions options);
  static int Fd(const ControlChannel& ch) { return ch.fd_; }
  static const std::string& Peer(const ControlChannel& ch) { return ch.peer_; }
  static bool Refused(const ControlChannel& ch) { return ch.refused_.load(); }

  // Reads the next handshake frame with whatever of it has arrived by `deadline` (now: only what is
  // already here); Timeout when it is not whole yet, which leaves the channel usable.
  static Result<Frame> Read(ControlChannel& ch, Clock::time_point deadline);
  // Handles the frame received in the server's current step; true once the channel is authenticated.
  // Answers are written by `write_by`.
  static Result<bool> ServerStep(ControlChannel& ch, const Frame& frame, ServerState& state,
                                 std::string_view name, const Secret& secret, Clock::time_point write_by);
  static Status Client(ControlChannel& ch, std::string_view name, PeerRole role, const Secret& secret,
                       Clock::time_point deadline);

 private:
  // Checks that `frame` is `type`; a Refused frame ends the handshake.
  static Status Check(ControlChannel& ch, const Frame& frame, MessageType type);
  static Result<Frame> Expect(ControlChannel& ch, MessageType type, Clock::time_point deadline);
};

}  // namespace weightport
