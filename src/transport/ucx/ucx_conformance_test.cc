// The transport conformance suite, run on UCX over shared memory and over TCP (loopback).
#include <chrono>

#include "transport/conformance/transport_conformance.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport::conformance {
namespace {

TransportConformanceParam UcxParam(std::string name, std::vector<std::string> transports) {
  return TransportConformanceParam{
      .name = std::move(name),
      .factory =
          [transports](const std::string& name) {
            UcxOptions options;
            options.name = name;
            options.transports = transports;
            options.keepalive_interval = std::chrono::milliseconds(500);
            return MakeUcxTransport(options);
          },
      .supports_fork = true,
      .max_size = uint64_t{1} << 30,
      // UCX does not know that a region was deregistered at its owner: over shm and TCP (software
      // RMA) the owner writes wherever the key's address points.
      .detects_deregistered_keys = false,
      .peer_loss_timeout = std::chrono::milliseconds(10000),
  };
}

// Endpoints are created from worker addresses, so no connection manager (sockaddr) is needed;
// shared-memory transports connect to the peer's interface directly, no wireup transport either.
INSTANTIATE_TEST_SUITE_P(Ucx, TransportConformance,
                         ::testing::Values(UcxParam("UcxShm", {"posix", "sysv", "cma", "self"}),
                                           UcxParam("UcxTcp", {"tcp"})),
                         ParamName);

}  // namespace
}  // namespace weightport::conformance
