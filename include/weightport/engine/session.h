// Pieces shared by the publisher and the subscriber: how they make their transport, and their
// control-plane timing.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "weightport/core/status.h"
#include "weightport/transport/transport.h"

namespace weightport {

// Makes the transport a publisher or subscriber moves weights with; `name` is the peer's name.
// The CLI passes a UCX one; tests pass fake or fault-injecting ones.
using TransportFactory = std::function<Result<std::unique_ptr<Transport>>(const std::string& name)>;

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
