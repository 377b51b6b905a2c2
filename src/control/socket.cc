#include "socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

namespace weightport::control_internal {
namespace {

std::string FormatSockaddr(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "unknown-address";
}

// Waits until fd is ready for `events`; Timeout when the deadline passes first.
Status WaitFor(int fd, short events, const Deadline& deadline, std::string_view what) {
  while (true) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, deadline.PollMs());
    if (n > 0) return Status::Ok();  // readable, writable, or an error/hang-up the next call reports
    if (n == 0) return Timeout(std::string(what) + ": timed out");
    if (errno != EINTR) return ErrnoError(std::string(what) + ": poll", errno);
  }
}

Status SetNoDelay(int fd, std::string_view what) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return ErrnoError(std::string(what) + ": setsockopt(TCP_NODELAY)", errno);
  }
  return Status::Ok();
}

Status SetBlocking(int fd, bool blocking, std::string_view what) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return ErrnoError(std::string(what) + ": fcntl", errno);
  flags = blocking ? (flags & ~O_NONBLOCK) : (flags | O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) != 0) return ErrnoError(std::string(what) + ": fcntl", errno);
  return Status::Ok();
}

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};

Result<std::unique_ptr<addrinfo, AddrInfoDeleter>> Resolve(const std::string& host, uint16_t port,
                                                           bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* out = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out);
  if (rc != 0) return NotFound("cannot resolve '" + host + "': " + gai_strerror(rc));
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(out);
}

}  // namespace

Status BindError(std::string_view where, int errnum) {
  if (errnum == EADDRINUSE) return AlreadyExists(std::string(where) + ": address already in use");
  return ErrnoError(std::string(where) + ": bind", errnum);
}

int Deadline::PollMs() const {
  auto left = at_ - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    Reset();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void UniqueFd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Result<std::pair<std::string, uint16_t>> SplitHostPort(std::string_view address) {
  std::string_view host;
  std::string_view port;
  if (!address.empty() && address.front() == '[') {
    size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return InvalidArgument("address '" + std::string(address) + "' is not [host]:port");
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument("address '" + std::string(address) + "' is not host:port");
    }
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  uint32_t value = 0;
  if (port.empty() || port.size() > 5)
    return InvalidArgument("address '" + std::string(address) + "': bad port");
  for (char c : port) {
    if (c < '0' || c > '9') return InvalidArgument("address '" + std::string(address) + "': bad port");
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value == 0 || value > 65535 || host.empty()) {
    return InvalidArgument("address '" + std::string(address) + "': needs a host and a port in 1..65535");
  }
  return std::pair(std::string(host), static_cast<uint16_t>(value));
}

Result<Listening> ListenTcp(std::string_view host, uint16_t port) {
  const std::string where = "control listener on " + std::string(host) + ":" + std::to_string(port);
  WP_ASSIGN_OR_RETURN(auto addrs, Resolve(std::string(host), port, /*passive=*/true));
  Status last = NotFound(where + ": no usable address");
  for (addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) {
      last = ErrnoError(where + ": socket", errno);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = BindError(where, errno);
      continue;
    }
    if (listen(fd.get(), SOMAXCONN) != 0) {
      last = ErrnoError(where + ": listen", errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      return ErrnoError(where + ": getsockname", errno);
    }
    // Non-blocking, so an accept after a poll that raced with a vanished client cannot hang.
    WP_RETURN_IF_ERROR(SetBlocking(fd.get(), false, where));
    Listening out;
    out.address = FormatSockaddr(reinterpret_cast<sockaddr*>(&bound));
    out.port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    out.fd = std::move(fd);
    return out;
  }
  return last;
}

Result<Connected> AcceptTcp(int listen_fd, const Deadline& deadline, std::string_view listen_address) {
  const std::string what = "control listener on " + std::string(listen_address);
  while (true) {
    WP_RETURN_IF_ERROR(WaitFor(listen_fd, POLLIN, deadline, what + ": accept"));
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      // The client may have gone between poll and accept; wait again until the deadline.
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
      return ErrnoError(what + ": accept", errno);
    }
    Connected out{UniqueFd(fd), FormatSockaddr(reinterpret_cast<sockaddr*>(&peer))};
    WP_RETURN_IF_ERROR(SetNoDelay(fd, out.address));
    return out;
  }
}

Result<Connected> ConnectTcp(std::string_view address, const Deadline& deadline) {
  WP_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(address));
  WP_ASSIGN_OR_RETURN(auto addrs, Resolve(host_port.first, host_port.second, /*passive=*/false));
  const std::string what = "coordinator at " + std::string(address);
  Status last = Unavailable(what + ": no usable address");
  for (addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (fd.get() < 0) {
      last = ErrnoError(what + ": socket", errno);
      continue;
    }
    // Non-blocking connect, so the wait for the three-way handshake is bounded by the deadline.
    if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS && errno != EINTR) {
        last = errno == ECONNREFUSED ? Unavailable(what + ": connection refused")
                                     : ErrnoError(what + ": connect", errno);
        continue;
      }
      WP_RETURN_IF_ERROR(WaitFor(fd.get(), POLLOUT, deadline, what + ": connect"));
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) {
        last = err == ECONNREFUSED ? Unavailable(what + ": connection refused")
                                   : ErrnoError(what + ": connect", err);
        continue;
      }
    }
    WP_RETURN_IF_ERROR(SetBlocking(fd.get(), true, what));
    WP_RETURN_IF_ERROR(SetNoDelay(fd.get(), what));
    return Connected{std::move(fd), FormatSockaddr(ai->ai_addr)};
  }
  return last;
}

Status SendAll(int fd, std::span<const std::byte> bytes, const Deadline& deadline, std::string_view peer) {
  size_t done = 0;
  while (done < bytes.size()) {
    WP_RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, std::string(peer) + ": send"));
    // MSG_DONTWAIT: poll said writable, but a large write must not block past the deadline.
    ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == EPIPE || errno == ECONNRESET)
        return Unavailable(std::string(peer) + ": connection closed by peer");
      return ErrnoError(std::string(peer) + ": send", errno);
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<size_t> RecvSome(int fd, std::span<std::byte> out, const Deadline& deadline, std::string_view peer) {
  while (true) {
    WP_RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, std::string(peer) + ": receive"));
    ssize_t n = recv(fd, out.data(), out.size(), MSG_DONTWAIT);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) return Unavailable(std::string(peer) + ": connection closed by peer");
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    if (errno == ECONNRESET) return Unavailable(std::string(peer) + ": connection reset by peer");
    return ErrnoError(std::string(peer) + ": receive", errno);
  }
}

}  // namespace weightport::control_internal
