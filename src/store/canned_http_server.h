// Test helper: an HTTP server on loopback that answers every request with one canned status and
// body, as a hostile or broken etcd gateway would. It reads each request to the end of its body
// (Content-Length), answers and closes the connection.
//
//   store_test::CannedHttpServer gateway(500, "{\"x\":" + std::string(100000, '['));
//   ASSERT_TRUE(gateway.Start().ok());
//   auto client = EtcdClient::Create(gateway.endpoint());
//
// Thread-safety: Start and the destructor from one thread; the server runs on its own.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <thread>

#include "weightport/core/status.h"

namespace weightport::store_test {

class CannedHttpServer {
 public:
  CannedHttpServer(int status, std::string body) : status_(status), body_(std::move(body)) {}
  ~CannedHttpServer() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }
  CannedHttpServer(const CannedHttpServer&) = delete;
  CannedHttpServer& operator=(const CannedHttpServer&) = delete;

  Status Start() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return ErrnoError("socket", errno);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      return ErrnoError("listen on 127.0.0.1:0", errno);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
    return Status::Ok();
  }

  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_.load(); }

 private:
  void Serve() {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;  // wakes to see stop_
      int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      ReadRequest(conn);
      requests_.fetch_add(1);
      const std::string answer =
          "HTTP/1.1 " + std::to_string(status_) + " Canned\r\nContent-Type: application/json\r\n" +
          "Content-Length: " + std::to_string(body_.size()) + "\r\nConnection: close\r\n\r\n" + body_;
      for (size_t sent = 0; sent < answer.size();) {
        ssize_t n = send(conn, answer.data() + sent, answer.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      close(conn);
    }
  }

  // Reads the headers and Content-Length bytes of body, for at most two seconds.
  static void ReadRequest(int conn) {
    std::string in;
    char buf[4096];
    for (int waits = 0; waits < 40; ++waits) {
      const size_t head_end = in.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const size_t cl = in.find("Content-Length: ");
        const size_t body = cl == std::string::npos ? 0 : std::strtoul(in.c_str() + cl + 16, nullptr, 10);
        if (in.size() >= head_end + 4 + body) return;
      }
      pollfd p{conn, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      ssize_t n = recv(conn, buf, sizeof(buf), 0);
      if (n <= 0) return;
      in.append(buf, static_cast<size_t>(n));
    }
  }

  const int status_;
  const std::string body_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

}  // namespace weightport::store_test
