// Pieces shared by the publisher and the subscriber: how they make their transport, and their
// control-plane timing.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "weightport/core/status.h"
#include "weightport/transport/transport.h"

namespace weightport {

// Makes the transport a publisher or subscriber moves weights with; `name` is the peer's name.
// The CLI passes a UCX one; tests pass fake or fault-injecting ones.
using TransportFactory = std::function<Result<std::unique_ptr<Transport>>(const std::string& name)>;

// Calls `attempt(time left)` until it succeeds, fails with something other than Unavailable or
// IoError (the peer is not listening yet), or `deadline` passes, pausing `pause` between attempts.
// For peers that may start in any order: a rank dialing a coordinator that is not up yet.
template <typename Attempt>
auto RetryWhileUnreachable(std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds pause,
                           Attempt attempt) {
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                      deadline - std::chrono::steady_clock::now()));
  };
  auto result = attempt(left());
  while (!result.ok() &&
         (result.status().code() == StatusCode::kUnavailable ||
          result.status().code() == StatusCode::kIoError) &&
         std::chrono::steady_clock::now() + pause < deadline) {
    std::this_thread::sleep_for(pause);
    result = attempt(left());
  }
  return result;
}

// UCX transports by what they may use: "shm" (posix, sysv, cma, self: one host), "tcp", or "auto"
// (whatever UCX finds, verbs included). InvalidArgument for anything else.
Result<TransportFactory> UcxTransportFactory(const std::string& choice);

struct SessionTiming {
  std::chrono::milliseconds connect_timeout{10'000};   // connecting and authenticating
  std::chrono::milliseconds heartbeat_interval{1000};  // how often the peer pings the coordinator
  std::chrono::milliseconds peer_timeout{10'000};      // coordinator silent this long: lost
  std::chrono::milliseconds goodbye_timeout{2000};     // Close waits this long for the coordinator
};

}  // namespace weightport
