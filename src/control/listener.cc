// ControlListener: accepts connections and runs their handshakes side by side on the caller's
// thread, nonblocking, so that a silent or slow peer delays neither other peers nor the caller.
//
// Every connection waits in pending_ until its handshake completes (Accept returns it), fails (Accept
// returns the error) or outlives handshake_timeout (reported and closed). pending_ holds at most
// max_pending_handshakes connections; one more closes the oldest, which a peer that knows the secret
// has long finished with (a handshake is two round trips).
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <vector>

#include "channel_handshake.h"
#include "socket.h"
#include "weightport/control/channel.h"

namespace weightport {

using control_internal::Deadline;
using Clock = std::chrono::steady_clock;

namespace {
// Bounds one write of Challenge or Welcome (a few hundred bytes into an empty socket buffer).
constexpr auto kHandshakeWriteTimeout = std::chrono::milliseconds(100);
// Connections taken from the backlog per wake-up, so a flood cannot starve pending handshakes.
constexpr int kAcceptBurst = 64;
static_assert(kMaxReasonSize + 64 <= kMaxHandshakePayload, "a Refused reason must fit a handshake frame");

int PollMsUntil(Clock::time_point at) {
  const auto left = at - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}
}  // namespace

struct ControlListener::Pending {
  std::unique_ptr<ControlChannel> ch;
  Clock::time_point deadline;
  ControlHandshake::ServerState state;
};

ControlListener::ControlListener(int fd, std::string address, uint16_t port, std::string name, Secret secret,
                                 ControlOptions options)
    : fd_(fd),
      address_(std::move(address)),
      port_(port),
      name_(std::move(name)),
      secret_(std::move(secret)),
      options_(std::move(options)) {}

ControlListener::~ControlListener() {
  pending_.clear();
  if (fd_ >= 0) close(fd_);
}

Result<std::unique_ptr<ControlListener>> ControlListener::Listen(std::string_view host, uint16_t port,
                                                                 std::string_view name, const Secret& secret,
                                                                 ControlOptions options) {
  // Names travel in Welcome; the strict decoder is the one definition of a valid name.
  if (Status s = HelloMsg::Decode(HelloMsg{PeerRole::kObserver, std::string(name)}.Encode()).status();
      !s.ok())
    return InvalidArgument("coordinator name '" + std::string(name) + "': " + s.message());
  if (options.max_pending_handshakes == 0)
    return InvalidArgument("max_pending_handshakes must be at least 1");
  WP_ASSIGN_OR_RETURN(control_internal::Listening listening, control_internal::ListenTcp(host, port));
  return std::unique_ptr<ControlListener>(new ControlListener(listening.fd.Release(), listening.address,
                                                              listening.port, std::string(name), secret,
                                                              std::move(options)));
}

void ControlListener::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

Status ControlListener::TakeConnections() {
  size_t evicted = 0;
  for (int i = 0; i < kAcceptBurst; ++i) {
    Result<control_internal::Connected> conn =
        control_internal::AcceptTcp(fd_, Deadline(std::chrono::milliseconds(0)), address_);
    if (!conn.ok()) {
      if (conn.status().code() == StatusCode::kTimeout) break;  // the backlog is empty
      return conn.status();
    }
    if (pending_.size() >= options_.max_pending_handshakes) {
      pending_.pop_front();  // closes it
      ++evicted;
    }
    auto pending = std::make_unique<Pending>();
    pending->ch = ControlHandshake::NewServerChannel(conn->fd.Release(), conn->address, options_);
    pending->deadline = Clock::now() + options_.handshake_timeout;
    pending_.push_back(std::move(pending));
  }
  if (evicted > 0) {
    Log("control listener on " + address_ + ": closed " + std::to_string(evicted) +
        " unauthenticated connection(s), oldest first: " + std::to_string(options_.max_pending_handshakes) +
        " handshakes in progress is the most allowed");
  }
  return Status::Ok();
}

void ControlListener::ExpireHandshakes() {
  const auto now = Clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if ((*it)->deadline > now) {
      ++it;
      continue;
    }
    Log("handshake with " + ControlHandshake::Peer(*(*it)->ch) + " failed: not done within " +
        std::to_string(options_.handshake_timeout.count()) + " ms");
    it = pending_.erase(it);
  }
}

Result<bool> ControlListener::Step(Pending& p) {
  ControlChannel& ch = *p.ch;
  // Only what has arrived: a partial frame stays buffered in the channel for the next step.
  Result<Frame> frame = ControlHandshake::Read(ch, Clock::now());
  Result<bool> done = false;
  if (frame.ok()) {
    done = ControlHandshake::ServerStep(ch, *frame, p.state, name_, secret_,
                                        std::min(p.deadline, Clock::now() + kHandshakeWriteTimeout));
  } else if (frame.status().code() != StatusCode::kTimeout) {
    done = frame.status();
  }
  if (!done.ok() && !ControlHandshake::Refused(ch))
    Log("handshake with " + ControlHandshake::Peer(ch) + " failed: " + done.status().message());
  return done;
}

Result<std::unique_ptr<ControlChannel>> ControlListener::Accept(std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + std::max(timeout, std::chrono::milliseconds(0));
  std::vector<pollfd> fds;
  // Bounded by `until`: every pass waits in poll for at most the time left.
  while (true) {
    ExpireHandshakes();
    fds.assign(1, pollfd{fd_, POLLIN, 0});
    Clock::time_point wake = until;
    for (const auto& p : pending_) {
      fds.push_back(pollfd{ControlHandshake::Fd(*p->ch), POLLIN, 0});
      wake = std::min(wake, p->deadline);
    }
    const int n = poll(fds.data(), fds.size(), PollMsUntil(wake));
    if (n < 0 && errno != EINTR) return ErrnoError("control listener on " + address_ + ": poll", errno);
    // The handshakes under way first; fds[i + 1] is pending_[i] until pending_ changes.
    for (size_t i = 0; n > 0 && i + 1 < fds.size(); ++i) {
      if (fds[i + 1].revents == 0) continue;
      Result<bool> done = Step(*pending_[i]);
      if (done.ok() && !*done) continue;
      std::unique_ptr<Pending> finished = std::move(pending_[i]);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      if (!done.ok()) return done.status();
      return std::move(finished->ch);
    }
    if (n > 0 && fds[0].revents != 0) WP_RETURN_IF_ERROR(TakeConnections());
    if (Clock::now() >= until) return Timeout("control listener on " + address_ + ": accept: timed out");
  }
}

}  // namespace weightport
