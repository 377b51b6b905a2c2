// Test helpers for control-plane tests: a test secret, a log sink that any thread may write, and
// the tests' patience.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace weightport::control_test
