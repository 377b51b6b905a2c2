#include "weightport/control/channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cctype>

#include "channel_handshake.h"
#include "socket.h"
#include "weightport/control/handshake.h"

namespace weightport {

using control_internal::Deadline;
using Clock = std::chrono::steady_clock;

namespace {
constexpr auto kRefusalSendTimeout = std::chrono::milliseconds(200);
// A receive buffer this large is released after its frame instead of kept for the next one.
constexpr size_t kKeepBufferBytes = 1 << 20;

// How much of a stranger's first bytes an error quotes.
constexpr size_t kQuotedBytes = 48;
constexpr auto kQuoteWait = std::chrono::milliseconds(50);

// The first line of `bytes`, printable, for an error message: "HTTP/1.1 400 Bad Request".
std::string Quote(ByteView bytes) {
  std::string out;
  for (std::byte b : bytes.first(std::min(bytes.size(), kQuotedBytes))) {
    const auto c = std::to_integer<unsigned char>(b);
    if (c == '\r' || c == '\n') break;
    if (std::isprint(c) != 0 && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Whether a frame header can open a handshake: frame 0, of a handshake message type.
bool OpensHandshake(ByteView header) {
  for (size_t i = 5; i < kFrameHeaderSize; ++i)
    if (header[i] != std::byte{0}) return false;
  const auto type = std::to_integer<uint8_t>(header[4]);
  return type >= static_cast<uint8_t>(MessageType::kHello) &&
         type <= static_cast<uint8_t>(MessageType::kRefused);
}
}  // namespace

// Ends a handshake whose first frame is not one: the peer speaks some other protocol (an HTTP server
// or client, most often). Quotes what it sent, including what else has already arrived.
Status ControlChannel::NotOurProtocol() {
  rbuf_.resize(kFrameHeaderSize + kQuotedBytes);
  // The dialing end waits a moment for the rest of a reply; the accepting end serves many peers from
  // one thread and takes only what is already here.
  const Deadline until(dialed_ ? kQuoteWait : std::chrono::milliseconds(0));
  for (int i = 0; i < 8 && rlen_ < rbuf_.size(); ++i) {
    Result<size_t> n = control_internal::RecvSome(fd_, std::span(rbuf_).subspan(rlen_), until, peer_);
    if (!n.ok()) break;
    rlen_ += *n;
  }
  Status why =
      InvalidArgument("peer at " + peer_address_ + " does not speak the weightport control protocol (got '" +
                      Quote(std::span(rbuf_).first(rlen_)) + "')");
  Log(why.message());
  refused_.store(true);
  Close();
  return why;
}

namespace {
Status CheckName(std::string_view name, std::string_view what) {
  // Names travel in Hello/Welcome; the strict decoder is the one definition of a valid name.
  Status status = HelloMsg::Decode(HelloMsg{PeerRole::kObserver, std::string(name)}.Encode()).status();
  if (!status.ok())
    return InvalidArgument(std::string(what) + " '" + std::string(name) + "': " + status.message());
  return Status::Ok();
}
}  // namespace

ControlChannel::ControlChannel(int fd, std::string peer_address, ControlOptions options)
    : fd_(fd), peer_address_(std::move(peer_address)), options_(std::move(options)) {}

ControlChannel::~ControlChannel() {
  Close();
  if (fd_ >= 0) close(fd_);
}

void ControlChannel::Close() {
  // shutdown, not close: another thread may be inside Send or Receive on this descriptor, and a
  // closed number could be reused by an unrelated file. The destructor closes it.
  if (!closed_.exchange(true) && fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

Status ControlChannel::Goodbye(std::chrono::milliseconds timeout) {
  Status status = Send(ByeMsg{});
  const auto deadline = Clock::now() + timeout;
  while (status.ok()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      status = Timeout(peer_ + " did not close the connection within " + std::to_string(timeout.count()) +
                       " ms of Bye");
      break;
    }
    Result<ControlMessage> m = Receive(left);
    if (!m.ok() && m.status().code() != StatusCode::kTimeout) break;  // the peer closed: done
  }
  Close();
  return status;
}

void ControlChannel::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

void ControlChannel::TurnAway(std::string_view why) {
  Send(RefusedMsg{std::string(why.substr(0, kMaxReasonSize))}).IgnoreError();
}

Status ControlChannel::Refuse(const Status& why, bool tell_peer, ByteView key) {
  Status named(why.code(), peer_ + ": " + why.message());
  if (refused_.exchange(true)) return named;
  Log("refused " + peer_ + ": " + why.message());
  if (tell_peer && !closed_.load()) {
    // Authentication failures tell the peer no more than that.
    std::string reason = why.code() == StatusCode::kPermissionDenied && key.data() == kHandshakeKey.data()
                             ? "authentication failed"
                             : why.message();
    std::lock_guard<std::mutex> lock(send_mu_);
    WriteFrame(MessageType::kRefused, RefusedMsg{reason}.Encode(), key, Clock::now() + kRefusalSendTimeout)
        .IgnoreError();
  }
  Close();
  return named;
}

Status ControlChannel::WriteFrame(MessageType type, ByteView payload, ByteView key,
                                  Clock::time_point deadline) {
  WP_ASSIGN_OR_RETURN(Bytes frame, EncodeFrame(type, send_seq_, payload, key));
  Status status = control_internal::SendAll(fd_, frame, Deadline(deadline), peer_);
  // Part of a frame may be on the wire: the sending stream cannot be resumed. The receiving one
  // is left open: a peer that refused this end sent its reason before closing, and a Send racing
  // with that close (a heartbeat) must not throw the reason away unread.
  if (!status.ok()) {
    if (!send_closed_.exchange(true) && fd_ >= 0) shutdown(fd_, SHUT_WR);
    return status;
  }
  ++send_seq_;
  return Status::Ok();
}

Result<Frame> ControlChannel::ReadFrame(ByteView key, Clock::time_point deadline) {
  const Deadline until(deadline);
  auto fill = [&](size_t want) -> Status {
    while (rlen_ < want) {
      Result<size_t> n =
          control_internal::RecvSome(fd_, std::span(rbuf_).subspan(rlen_, want - rlen_), until, peer_);
      if (!n.ok()) {
        if (n.status().code() == StatusCode::kTimeout) return n.status();  // resumable
        Close();
        if (n.status().code() == StatusCode::kUnavailable && rlen_ > 0) {
          return Unavailable(n.status().message() + " mid-frame (" + std::to_string(rlen_) + " of " +
                             std::to_string(want) + " bytes)");
        }
        return n.status();
      }
      rlen_ += *n;
    }
    return Status::Ok();
  };
  if (rbuf_.size() < kFrameHeaderSize) rbuf_.resize(kFrameHeaderSize);
  WP_RETURN_IF_ERROR(fill(kFrameHeaderSize));
  // Before the peer has authenticated, frames are handshake messages, all small: a stranger cannot
  // make this end allocate max_payload bytes.
  const bool handshake = key.data() == kHandshakeKey.data();
  if (handshake && recv_seq_ == 0 && !OpensHandshake(std::span(rbuf_).first(kFrameHeaderSize)))
    return NotOurProtocol();
  // The length is checked here, before the buffer grows to hold the payload.
  const uint32_t limit =
      handshake ? std::min(options_.max_payload, kMaxHandshakePayload) : options_.max_payload;
  Result<FrameHeader> header = DecodeFrameHeader(std::span(rbuf_).first(kFrameHeaderSize), limit);
  if (!header.ok()) return Refuse(header.status(), true, key);
  const size_t total = kFrameHeaderSize + size_t{header->payload_size} + kFrameMacSize;
  if (rbuf_.size() != total) rbuf_.resize(total);
  WP_RETURN_IF_ERROR(fill(total));
  Result<Frame> frame = DecodeFrame(rbuf_, key, recv_seq_, limit);
  rlen_ = 0;
  if (rbuf_.capacity() > kKeepBufferBytes) Bytes().swap(rbuf_);
  if (!frame.ok()) return Refuse(frame.status(), true, key);
  ++recv_seq_;
  return frame;
}

Status ControlChannel::Send(MessageType type, ByteView payload) {
  if (closed_.load() || send_closed_.load()) return FailedPrecondition(peer_ + ": channel is closed");
  if (payload.size() > options_.max_payload) {
    return InvalidArgument(peer_ + ": " + std::string(MessageTypeName(type)) + " payload of " +
                           std::to_string(payload.size()) + " bytes exceeds the " +
                           std::to_string(options_.max_payload) + "-byte limit");
  }
  std::lock_guard<std::mutex> lock(send_mu_);
  return WriteFrame(type, payload, session_key_, Clock::now() + options_.send_timeout);
}

Result<ControlMessage> ControlChannel::Receive(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(recv_mu_);
  if (closed_.load()) return FailedPrecondition(peer_ + ": channel is closed");
  WP_ASSIGN_OR_RETURN(Frame frame, ReadFrame(session_key_, Clock::now() + timeout));
  if (frame.type == MessageType::kRefused) {
    Result<RefusedMsg> refused = RefusedMsg::Decode(frame.payload);
    std::string reason = refused.ok() ? refused->reason : "(malformed Refused message)";
    Log(peer_ + " refused the connection: " + reason);
    Close();
    return PermissionDenied(peer_ + " refused the connection: " + reason);
  }
  return ControlMessage{frame.type, std::move(frame.payload)};
}

Result<std::unique_ptr<ControlChannel>> ControlChannel::Connect(std::string_view address,
                                                                std::string_view name, PeerRole role,
                                                                const Secret& secret,
                                                                std::chrono::milliseconds timeout,
                                                                ControlOptions options) {
  WP_RETURN_IF_ERROR(CheckName(name, "client name"));
  const auto deadline = Clock::now() + timeout;
  WP_ASSIGN_OR_RETURN(control_internal::Connected conn,
                      control_internal::ConnectTcp(address, Deadline(deadline)));
  std::unique_ptr<ControlChannel> ch(new ControlChannel(conn.fd.Release(), conn.address, std::move(options)));
  ch->peer_ = "coordinator at " + ch->peer_address_;
  ch->dialed_ = true;
  Status status = ControlHandshake::Client(*ch, name, role, secret, deadline);
  if (!status.ok()) {
    if (!ch->refused_.load()) ch->Log("handshake with " + ch->peer_ + " failed: " + status.message());
    return status;
  }
  return ch;
}

}  // namespace weightport
