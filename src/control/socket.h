// TCP plumbing for the control channel: deadlines, bounded waits, whole-buffer sends. Internal.
//
// Every blocking step waits in poll() with the time left to a Deadline, restarts on EINTR, and
// handles partial reads and writes. Sends use MSG_NOSIGNAL, so a closed peer is an error, never a
// SIGPIPE. Errors name the peer as described by the caller.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "weightport/core/status.h"

namespace weightport::control_internal {

class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds timeout)
      : at_(std::chrono::steady_clock::now() + std::max(timeout, std::chrono::milliseconds(0))) {}
  explicit Deadline(std::chrono::steady_clock::time_point at) : at_(at) {}
  // Milliseconds left for poll(), rounded up so a wait never ends just short of the deadline.
  int PollMs() const;
  bool Expired() const { return std::chrono::steady_clock::now() >= at_; }
  std::chrono::steady_clock::time_point At() const { return at_; }
  Deadline Sooner(std::chrono::milliseconds timeout) const {
    Deadline other(timeout);
    return other.at_ < at_ ? other : *this;
  }

 private:
  std::chrono::steady_clock::time_point at_;
};

// Owns a file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset();

 private:
  int fd_ = -1;
};

// "host:port" or "[v6]:port" -> (host, port).
Result<std::pair<std::string, uint16_t>> SplitHostPort(std::string_view address);

// The error for a failed bind(2) of `where` ("control listener on 127.0.0.1:7000"): AlreadyExists
// "...: address already in use" when another socket holds the port, IoError otherwise.
Status BindError(std::string_view where, int errnum);

struct Listening {
  UniqueFd fd;
  std::string address;  // the bound address, "127.0.0.1:41234" (port 0 resolved)
  uint16_t port = 0;
};
Result<Listening> ListenTcp(std::string_view host, uint16_t port);

struct Connected {
  UniqueFd fd;
  std::string address;  // the peer, "127.0.0.1:41234"
};
// Waits for one connection; the returned socket is blocking with TCP_NODELAY.
Result<Connected> AcceptTcp(int listen_fd, const Deadline& deadline, std::string_view listen_address);
// Resolves and connects within the deadline; the returned socket is blocking with TCP_NODELAY.
Result<Connected> ConnectTcp(std::string_view address, const Deadline& deadline);

Status SendAll(int fd, std::span<const std::byte> bytes, const Deadline& deadline, std::string_view peer);
// Reads at least one byte (at most out.size()). Timeout, Unavailable when the peer closed the
// connection, IoError otherwise.
Result<size_t> RecvSome(int fd, std::span<std::byte> out, const Deadline& deadline, std::string_view peer);

}  // namespace weightport::control_internal
