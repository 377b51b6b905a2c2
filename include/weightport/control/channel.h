// An authenticated, framed TCP connection of the control plane (coordinator <-> publishers,
// subscribers, observers).
//
// A ControlListener (the coordinator end) binds and accepts; ControlChannel::Connect (the peer end)
// dials. Both run the mutual handshake of auth.h before returning a channel, so a channel
// that exists has proven the peer knows the shared secret. Every later frame is MACed with the
// session key and numbered; a frame with a wrong MAC or number, an oversize length, or a malformed
// handshake message ends the connection: the offender is sent a Refused message where that makes
// sense, the socket is shut down, and the refusal is reported to the log sink with the peer's
// address. The library never prints.
//
// Errors name the peer: "subscriber 'sub-2' at 127.0.0.1:41234", "coordinator 'coord' at
// 127.0.0.1:7000". Every wait is bounded by a timeout.
//
// Thread-safety: Send may be called from any thread (calls are serialised); Receive from one thread
// at a time, which may run concurrently with Send. ControlListener::Accept from one thread at a time
// (it runs the handshakes of all pending connections on that thread, without blocking on any).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "weightport/control/auth.h"
#include "weightport/control/protocol.h"
#include "weightport/core/status.h"

namespace weightport {

struct ControlOptions {
  // Bounds on the handshake (Accept, after a connection arrives) and on each Send.
  std::chrono::milliseconds handshake_timeout{5000};
  // The most connections a ControlListener holds before they authenticate; one more closes the
  // oldest. At least 1.
  size_t max_pending_handshakes = 64;
  std::chrono::milliseconds send_timeout{10000};
  // Frames announcing a larger payload are refused before any buffer is allocated.
  uint32_t max_payload = kDefaultMaxPayload;
  // Receives one line per refused peer or protocol violation. Null: not reported.
  std::function<void(std::string)> log;
};

struct ControlMessage {
  MessageType type = MessageType::kHeartbeat;
  Bytes payload;  // decode with the matching *Msg::Decode
};

class ControlChannel {
 public:
  // Connects to "host:port" and authenticates as `name` with `role`. `timeout` bounds the whole
  // connect and handshake. PermissionDenied when either side fails to authenticate the other.
  static Result<std::unique_ptr<ControlChannel>> Connect(std::string_view address, std::string_view name,
                                                         PeerRole role, const Secret& secret,
                                                         std::chrono::milliseconds timeout,
                                                         ControlOptions options = {});
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  Status Send(MessageType type, ByteView payload);
  template <typename M>
  Status Send(const M& message) {
    return Send(M::kType, message.Encode());
  }

  // The next message. Timeout leaves the channel usable (a partly received frame is kept and
  // completed by the next call). Unavailable when the peer closed the connection; PermissionDenied
  // when it sent a bad frame or a Refused message. Any error but Timeout closes the channel.
  Result<ControlMessage> Receive(std::chrono::milliseconds timeout);

  // Tells an authenticated peer why it is not let in or must leave: a Refused message, the reason cut
  // to kMaxReasonSize. Best effort on purpose: a peer that cannot read it learns as much from the
  // connection closing, which follows.
  void TurnAway(std::string_view why);

  // Shuts the connection down; later calls fail with FailedPrecondition. Idempotent.
  void Close();

  // The orderly end of a session: sends Bye, then reads (and drops) what is still in flight until the
  // peer closes its end, so that once this returns the peer has processed the Bye (a successor with the
  // same name or role is not refused as a duplicate). Closes the channel in every case; Timeout when
  // the peer did not close within `timeout`. Call it only where no other thread receives.
  Status Goodbye(std::chrono::milliseconds timeout);
  bool closed() const { return closed_.load(); }

  // "subscriber 'sub-2' at 127.0.0.1:41234"
  const std::string& peer() const { return peer_; }
  const std::string& peer_name() const { return peer_name_; }
  const std::string& peer_address() const { return peer_address_; }
  // The role the peer claimed in its Hello (on the accepting end; kObserver on the dialing end).
  PeerRole peer_role() const { return peer_role_; }

 private:
  friend class ControlListener;
  friend struct ControlHandshake;
  ControlChannel(int fd, std::string peer_address, ControlOptions options);

  // Reads one whole frame MACed with `key`, checks its number. Handshake and Receive share it.
  Result<Frame> ReadFrame(ByteView key, std::chrono::steady_clock::time_point deadline);
  Status WriteFrame(MessageType type, ByteView payload, ByteView key,
                    std::chrono::steady_clock::time_point deadline);
  // Reports and ends the connection after a protocol violation, telling the peer why when
  // `tell_peer`. Returns `why` for the caller to propagate.
  Status Refuse(const Status& why, bool tell_peer, ByteView key);
  // Ends a handshake whose peer's first bytes are not a handshake frame, quoting them.
  Status NotOurProtocol();
  void Log(const std::string& line) const;

  int fd_ = -1;
  std::string peer_address_;
  std::string peer_name_;
  std::string peer_;
  PeerRole peer_role_ = PeerRole::kObserver;
  bool dialed_ = false;  // Connect made it (the accepting end: false)
  ControlOptions options_;
  Digest session_key_{};
  std::atomic<bool> closed_{false};
  // A send failed: the sending side is shut, but frames the peer sent before it closed (a Refused
  // naming why) can still be read, until the peer's end is reached.
  std::atomic<bool> send_closed_{false};
  std::atomic<bool> refused_{false};  // Refuse() ran (and logged)

  std::mutex send_mu_;  // serialises frames on the wire and guards send_seq_
  uint64_t send_seq_ = 0;

  std::mutex recv_mu_;  // guards the receive state below
  uint64_t recv_seq_ = 0;
  Bytes rbuf_;       // the frame being received: header first, then sized to the whole frame
  size_t rlen_ = 0;  // bytes of rbuf_ received so far
};

class ControlListener {
 public:
  // Binds host:port (port 0: any free port; see address()/port()). `name` is this end's name, sent
  // to peers in Welcome. A port another socket holds is AlreadyExists
  // "control listener on 127.0.0.1:7000: address already in use".
  static Result<std::unique_ptr<ControlListener>> Listen(std::string_view host, uint16_t port,
                                                         std::string_view name, const Secret& secret,
                                                         ControlOptions options = {});
  ~ControlListener();
  ControlListener(const ControlListener&) = delete;
  ControlListener& operator=(const ControlListener&) = delete;

  // Waits up to `timeout` for a peer to complete the server side of the handshake, and returns its
  // channel; Timeout when none did. Connections are taken in as they arrive and their handshakes
  // run side by side while Accept runs, none waiting on another, so Accept returns within `timeout`
  // however many peers are silent. Each handshake is bounded by options.handshake_timeout (then it
  // is reported and closed) and at most options.max_pending_handshakes are under way (one more
  // closes the oldest, reported). A peer that fails its handshake is refused and reported, and
  // Accept returns that error (PermissionDenied, InvalidArgument, ...) naming the peer; call Accept
  // again for the next one. Connections still in their handshake wait for the next call.
  Result<std::unique_ptr<ControlChannel>> Accept(std::chrono::milliseconds timeout);

  const std::string& address() const { return address_; }  // "127.0.0.1:41234"
  uint16_t port() const { return port_; }

 private:
  struct Pending;  // a connection in its handshake (listener.cc)
  ControlListener(int fd, std::string address, uint16_t port, std::string name, Secret secret,
                  ControlOptions options);
  // Takes queued connections into pending_, closing the oldest beyond the cap.
  Status TakeConnections();
  // Reports and closes the connections whose handshake_timeout has passed.
  void ExpireHandshakes();
  // Advances one handshake with what has arrived: true when it is complete.
  Result<bool> Step(Pending& p);
  void Log(const std::string& line) const;

  int fd_ = -1;
  std::string address_;
  uint16_t port_ = 0;
  std::string name_;
  Secret secret_;
  ControlOptions options_;
  std::deque<std::unique_ptr<Pending>> pending_;  // oldest first
};

}  // namespace weightport
