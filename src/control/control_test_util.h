// Test helpers for control-plane tests: a test secret, a log sink that any thread may write, and
// the tests' patience.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "weightport/control/auth.h"

namespace weightport::control_test {

inline constexpr std::chrono::milliseconds kWait(10'000);

inline Secret MakeSecret(char fill) {
  std::string s(32, fill);
  return *Secret::FromBytes(std::as_bytes(std::span(s.data(), s.size())), "test secret");
}

// Collects log lines from any thread.
struct LogCapture {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(std::string)> Sink() {
    return [this](std::string line) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(std::move(line));
    };
  }
  bool Contains(std::string_view needle) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& l : lines)
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }
};

// A TCP connection to 127.0.0.1:port that never sends a byte (a port scanner, a stuck client).
class IdleSocket {
 public:
  explicit IdleSocket(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~IdleSocket() { close(fd_); }
  IdleSocket(const IdleSocket&) = delete;
  IdleSocket& operator=(const IdleSocket&) = delete;
  // True when the server has closed its end (EOF or reset) within `timeout`.
  bool ClosedByServer(std::chrono::milliseconds timeout) const {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char c;
    return recv(fd_, &c, 1, MSG_DONTWAIT) <= 0;
  }

 private:
  int fd_ = -1;
};

}  // namespace weightport::control_test
