// MetricsServer: one thread that polls every connection at once, nonblocking: each reads one
// request head within a deadline and a size limit, is answered and closed, and none waits on
// another, so silent clients cannot delay a scrape. At most max_connections are open; one more
// closes the oldest. The poll includes an eventfd that Stop() makes readable, so Stop() never waits
// for a slow or silent client.
#include "weightport/control/metrics_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "socket.h"
#include "weightport/control/metrics.h"

namespace weightport {

using control_internal::Deadline;
using control_internal::UniqueFd;

namespace {

enum class Wait { kReady, kTimeout, kStopped, kError };

std::string JoinHostPort(std::string_view host, uint16_t port) {
  bool v6 = host.find(':') != std::string_view::npos;
  return (v6 ? "[" + std::string(host) + "]" : std::string(host)) + ":" + std::to_string(port);
}

// Offset just past the blank line that ends a request head ("\r\n\r\n", or bare "\n" line ends as
// RFC 9112 lets a server accept), searching from `from`; npos when not there yet.
size_t HeadEnd(const std::string& head, size_t from) {
  for (size_t nl = head.find('\n', from); nl != std::string::npos; nl = head.find('\n', nl + 1)) {
    if (nl + 1 < head.size() && head[nl + 1] == '\n') return nl + 2;
    if (nl + 2 < head.size() && head[nl + 1] == '\r' && head[nl + 2] == '\n') return nl + 3;
  }
  return std::string::npos;
}

}  // namespace

struct MetricsServer::State {
  State(const Metrics& m, MetricsServerOptions o) : metrics(m), options(o) {}

  const Metrics& metrics;
  const MetricsServerOptions options;
  UniqueFd listen_fd;
  UniqueFd wake_fd;  // eventfd, readable once Stop() has been called
  std::string address;
  uint16_t port = 0;
  std::mutex stop_mu;  // makes Stop() idempotent across threads
  std::thread thread;

  // Waits for `events` on fd (timeout_ms -1: no limit) or for Stop(). kError: poll itself failed.
  Wait WaitFor(int fd, short events, int timeout_ms) const {
    pollfd p[2] = {{wake_fd.get(), POLLIN, 0}, {fd, events, 0}};
    int n;
    do {
      n = poll(p, 2, timeout_ms);
    } while (n < 0 && errno == EINTR);  // a signal restarts the full wait; rare enough
    if (n < 0) return Wait::kError;
    if (p[0].revents != 0) return Wait::kStopped;
    return n == 0 ? Wait::kTimeout : Wait::kReady;
  }

  // One connection: its request head arriving, its response leaving, then a short drain.
  struct Conn {
    enum class Phase { kReading, kWriting, kDraining };
    UniqueFd fd;
    Phase phase = Phase::kReading;
    std::chrono::steady_clock::time_point deadline;  // of the current phase
    std::string head;                                // the request head so far
    std::string out;                                 // the response
    size_t sent = 0;
    size_t drained = 0;
  };
  std::deque<Conn> conns;  // oldest first; only the server thread touches it

  void Run() {
    std::vector<pollfd> fds;
    while (true) {
      fds.assign({{wake_fd.get(), POLLIN, 0}, {listen_fd.get(), POLLIN, 0}});
      auto wake = std::chrono::steady_clock::time_point::max();
      for (const Conn& c : conns) {
        fds.push_back(
            {c.fd.get(), static_cast<short>(c.phase == Conn::Phase::kWriting ? POLLOUT : POLLIN), 0});
        wake = std::min(wake, c.deadline);
      }
      const int timeout_ms = conns.empty() ? -1 : Deadline(wake).PollMs();
      int n = poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0 && errno != EINTR) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // poll itself failed: back off
        continue;
      }
      if (n > 0 && fds[0].revents != 0) return;  // Stop()
      // fds[i + 2] is conns[i]: step the ready ones, then drop the finished and the expired.
      const auto now = std::chrono::steady_clock::now();
      std::vector<bool> done(conns.size(), false);
      for (size_t i = 0; i < conns.size(); ++i) {
        if (n > 0 && fds[i + 2].revents != 0) done[i] = !Step(conns[i]);
        if (!done[i] && now >= conns[i].deadline) done[i] = !Expire(conns[i]);
      }
      for (size_t i = conns.size(); i-- > 0;)
        if (done[i]) conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
      if (n > 0 && fds[1].revents != 0 && !TakeConnections()) {
        // accept failed (EMFILE and friends: the connection stays queued and the listener readable).
        // Back off rather than spin, still waking at once for Stop().
        if (WaitFor(wake_fd.get(), POLLIN, 100) == Wait::kStopped) return;
      }
    }
  }

  // Accepts what is queued (a bounded burst); beyond max_connections the oldest is closed. False
  // when accept failed for want of resources.
  bool TakeConnections() {
    for (int i = 0; i < 64; ++i) {
      int fd = accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
      if (conns.size() >= options.max_connections) conns.pop_front();
      Conn& c = conns.emplace_back();
      c.fd = UniqueFd(fd);
      c.deadline = Deadline(options.request_timeout).At();
    }
    return true;
  }

  // A phase's deadline passed: a request not complete is answered 408; otherwise the connection
  // ends. False when it is finished.
  bool Expire(Conn& c) {
    if (c.phase != Conn::Phase::kReading) return false;
    Answer(c, Response("408 Request Timeout", "", "request timed out\n", false));
    return Step(c);
  }

  void Answer(Conn& c, std::string response) {
    c.phase = Conn::Phase::kWriting;
    c.out = std::move(response);
    c.deadline = Deadline(options.request_timeout).At();
  }

  // Moves the connection on with what the socket allows now. False when it is finished.
  bool Step(Conn& c) {
    const int fd = c.fd.get();
    if (c.phase == Conn::Phase::kReading) {
      const size_t max = options.max_request_bytes;
      char buf[4096];
      ssize_t n = recv(fd, buf, std::min(sizeof(buf), max + 1 - c.head.size()), 0);
      if (n == 0) return false;  // the client left before finishing its request
      if (n < 0) return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK;
      size_t from = c.head.size() >= 2 ? c.head.size() - 2 : 0;
      c.head.append(buf, static_cast<size_t>(n));
      size_t end = HeadEnd(c.head, from);
      if (end != std::string::npos && end <= max) {
        Answer(c, Respond(c.head));
      } else if (c.head.size() > max) {
        Answer(c, Response("431 Request Header Fields Too Large", "", "request head too large\n", false));
      } else {
        return true;
      }
    }
    if (c.phase == Conn::Phase::kWriting) {
      while (c.sent < c.out.size()) {
        ssize_t n = send(fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n < 0) return errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK;
        c.sent += static_cast<size_t>(n);
      }
      // Half-close, then drain what the client still sends (bounded), so that closing with unread
      // bytes does not reset the connection before the client has read the response.
      shutdown(fd, SHUT_WR);
      c.phase = Conn::Phase::kDraining;
      c.deadline = Deadline(std::chrono::milliseconds(250)).At();
      return true;
    }
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    if (n > 0) c.drained += static_cast<size_t>(n);
    return c.drained < 64 * 1024;
  }

  // The response to a whole request head.
  std::string Respond(const std::string& head) const {
    // Request line: METHOD SP target SP HTTP/1.x
    std::string_view line(head.data(), head.find('\n'));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t sp1 = line.find(' ');
    size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos ||
        !line.substr(sp2 + 1).starts_with("HTTP/1.") || sp1 == 0 || sp2 == sp1 + 1) {
      return Response("400 Bad Request", "", "malformed request line\n", false);
    }
    std::string_view method = line.substr(0, sp1);
    std::string_view path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    path = path.substr(0, path.find('?'));
    const bool head_only = method == "HEAD";
    if (method != "GET" && !head_only) {
      return Response("405 Method Not Allowed", "Allow: GET, HEAD\r\n", "method not allowed\n", false);
    }
    if (path != "/metrics") return Response("404 Not Found", "", "not found; try /metrics\n", head_only);
    return Response("200 OK", "", metrics.RenderPrometheus(), head_only,
                    "text/plain; version=0.0.4; charset=utf-8");
  }

  static std::string Response(std::string_view status, std::string_view extra_headers,
                              const std::string& body, bool head_only,
                              std::string_view content_type = "text/plain; charset=utf-8") {
    std::string response = "HTTP/1.1 " + std::string(status) +
                           "\r\nContent-Type: " + std::string(content_type) +
                           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                           std::string(extra_headers) + "Connection: close\r\n\r\n";
    if (!head_only) response += body;
    return response;
  }
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(std::string_view host, uint16_t port,
                                                            const Metrics& metrics,
                                                            MetricsServerOptions options) {
  const std::string where = "metrics server on " + JoinHostPort(host, port);
  if (host.empty()) return InvalidArgument(where + ": empty host (0.0.0.0 listens on all interfaces)");
  if (options.max_request_bytes == 0 || options.max_request_bytes > (1u << 20)) {
    return InvalidArgument(where + ": max_request_bytes must be in 1..1048576");
  }
  if (options.max_connections == 0) return InvalidArgument(where + ": max_connections must be at least 1");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addrs = nullptr;
  const std::string host_str(host);
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host_str.c_str(), service.c_str(), &hints, &addrs); rc != 0) {
    return NotFound(where + ": cannot resolve host: " + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(addrs, &freeaddrinfo);

  auto state = std::make_unique<State>(metrics, options);
  Status last = NotFound(where + ": no usable address");
  for (addrinfo* ai = addrs; ai != nullptr && state->listen_fd.get() < 0; ai = ai->ai_next) {
    UniqueFd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (fd.get() < 0) {
      last = ErrnoError(where + ": socket", errno);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = control_internal::BindError(where, errno);
      continue;
    }
    if (listen(fd.get(), SOMAXCONN) != 0) {
      last = ErrnoError(where + ": listen", errno);
      continue;
    }
    state->listen_fd = std::move(fd);
  }
  if (state->listen_fd.get() < 0) return last;

  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(state->listen_fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return ErrnoError(where + ": getsockname", errno);
  }
  char text[INET6_ADDRSTRLEN] = "?";
  if (bound.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&bound);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    state->port = ntohs(in6->sin6_port);
  } else {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&bound);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    state->port = ntohs(in->sin_port);
  }
  state->address = JoinHostPort(text, state->port);

  state->wake_fd = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (state->wake_fd.get() < 0) return ErrnoError(where + ": eventfd", errno);
  state->thread = std::thread([s = state.get()] { s->Run(); });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(state)));
}

MetricsServer::MetricsServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

MetricsServer::~MetricsServer() { Stop(); }

uint16_t MetricsServer::port() const { return state_->port; }

std::string MetricsServer::address() const { return state_->address; }

void MetricsServer::Stop() {
  std::lock_guard<std::mutex> lock(state_->stop_mu);
  if (!state_->thread.joinable()) return;
  uint64_t one = 1;
  // An eventfd write fails only on counter overflow; it is never read, so it stays readable and
  // every later wait of the server thread ends at once.
  [[maybe_unused]] ssize_t written = write(state_->wake_fd.get(), &one, sizeof(one));
  state_->thread.join();
  state_->conns.clear();      // the thread is gone: close what it still held
  state_->listen_fd.Reset();  // clients now get "connection refused" instead of waiting
}

}  // namespace weightport
