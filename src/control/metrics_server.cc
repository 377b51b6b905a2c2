// MetricsServer: one thread that accepts a connection, reads one request head within a deadline
// and a size limit, answers, and closes. Every wait polls the connection together with an eventfd
// that Stop() makes readable, so Stop() never waits for a slow or silent client.
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
#include <string>
#include <thread>

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
  Wait WaitFor(int fd, short events, const Deadline& deadline) const {
    return WaitFor(fd, events, deadline.PollMs());
  }

  void Run() {
    while (true) {
      Wait w = WaitFor(listen_fd.get(), POLLIN, -1);
      if (w == Wait::kStopped) return;
      if (w == Wait::kReady) {
        int fd = accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
          UniqueFd conn(fd);
          Serve(conn.get());
          continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
      }
      // poll failed, or accept did (EMFILE and friends: the connection stays queued and the listener
      // readable). Back off rather than spin, still waking at once for Stop().
      Wait backoff = WaitFor(wake_fd.get(), POLLIN, 100);
      if (backoff == Wait::kStopped) return;
      if (backoff == Wait::kError) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  void Serve(int fd) {
    const size_t max = options.max_request_bytes;
    Deadline deadline(options.request_timeout);
    std::string head;
    size_t end = std::string::npos;
    char buf[4096];
    // Bounded by the deadline, and by max + 1 bytes read in all.
    while (true) {
      Wait w = WaitFor(fd, POLLIN, deadline);
      if (w == Wait::kStopped || w == Wait::kError) return;
      if (w == Wait::kTimeout) return Reply(fd, "408 Request Timeout", "", "request timed out\n", false);
      ssize_t n = recv(fd, buf, std::min(sizeof(buf), max + 1 - head.size()), 0);
      if (n == 0) return;  // the client left before finishing its request
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        return;
      }
      size_t from = head.size() >= 2 ? head.size() - 2 : 0;
      head.append(buf, static_cast<size_t>(n));
      end = HeadEnd(head, from);
      if (end != std::string::npos && end <= max) break;
      if (head.size() > max) {
        return Reply(fd, "431 Request Header Fields Too Large", "", "request head too large\n", false);
      }
    }
    // Request line: METHOD SP target SP HTTP/1.x
    std::string_view line(head.data(), head.find('\n'));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t sp1 = line.find(' ');
    size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos ||
        !line.substr(sp2 + 1).starts_with("HTTP/1.") || sp1 == 0 || sp2 == sp1 + 1) {
      return Reply(fd, "400 Bad Request", "", "malformed request line\n", false);
    }
    std::string_view method = line.substr(0, sp1);
    std::string_view path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    path = path.substr(0, path.find('?'));
    const bool head_only = method == "HEAD";
    if (method != "GET" && !head_only) {
      return Reply(fd, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", "method not allowed\n", false);
    }
    if (path != "/metrics") return Reply(fd, "404 Not Found", "", "not found; try /metrics\n", head_only);
    Reply(fd, "200 OK", "", metrics.RenderPrometheus(), head_only,
          "text/plain; version=0.0.4; charset=utf-8");
  }

  // Sends the whole response within a fresh deadline, then half-closes and drains what the client
  // still sends (bounded), so that closing with unread bytes does not reset the connection before
  // the client has read the response.
  void Reply(int fd, std::string_view status, std::string_view extra_headers, const std::string& body,
             bool head_only, std::string_view content_type = "text/plain; charset=utf-8") {
    std::string response = "HTTP/1.1 " + std::string(status) +
                           "\r\nContent-Type: " + std::string(content_type) +
                           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                           std::string(extra_headers) + "Connection: close\r\n\r\n";
    if (!head_only) response += body;
    Deadline deadline(options.request_timeout);
    size_t done = 0;
    while (done < response.size()) {
      if (WaitFor(fd, POLLOUT, deadline) != Wait::kReady) return;
      ssize_t n = send(fd, response.data() + done, response.size() - done, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        return;
      }
      done += static_cast<size_t>(n);
    }
    shutdown(fd, SHUT_WR);
    Deadline linger(std::chrono::milliseconds(250));
    char buf[4096];
    for (size_t drained = 0; drained < 64 * 1024;) {
      if (WaitFor(fd, POLLIN, linger) != Wait::kReady) return;
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) return;
      if (n > 0) drained += static_cast<size_t>(n);
    }
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
    if (listen(fd.get(), 64) != 0) {
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
  state_->listen_fd.Reset();  // clients now get "connection refused" instead of waiting
}

}  // namespace weightport
