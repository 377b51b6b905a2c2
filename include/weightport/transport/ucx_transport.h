// UCX backend of the Transport interface (UCP: shared memory, CMA, TCP, RDMA verbs).
//
// One UcxTransport owns one ucp_context and one ucp_worker; it follows the Transport threading
// model (transport.h): every call on the owning thread except Wake(). Endpoints are created from the
// peer's worker address (Transport::address()), with peer-failure error handling, so a lost peer
// fails the pending operations of its connections with kUnavailable.
//
// Memory: Register() maps existing memory (ucp_mem_map of an address range). With UCX 1.13 a Put or
// Get into such memory over shm or TCP is emulated in software: data travels as Active Messages and
// the OWNER's progress loop copies it into place. UcxAllocate() instead lets UCX allocate the region
// (SysV/POSIX shared memory when a shm transport is enabled); a same-host peer then maps it and a
// Put/Get is one memcpy by the initiator, with no work by the owner. Arenas that peers write into
// should be allocated that way.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/transport/transport.h"

namespace weightport {

struct UcxOptions {
  // This transport's name; travels with each message it sends and names it in errors.
  std::string name;
  // UCX transports to use, like UCX_TLS: e.g. {"posix", "sysv", "cma", "self"} or {"tcp"}.
  // Empty: UCX's default ("all", or whatever UCX_TLS in the environment says).
  std::vector<std::string> transports;
  // Largest control message Send() accepts (and this transport accepts from a peer).
  size_t max_message_bytes = 1 << 20;
  // How often UCX probes peers for liveness; a peer process that died is reported lost after about
  // this long. Zero: UCX's default (20 s in UCX 1.13).
  std::chrono::milliseconds keepalive_interval{0};
  // Further UCX settings, passed to ucp_config_modify as given (names without the "UCX_" prefix,
  // e.g. {"RNDV_THRESH", "64K"} or, for a UCT setting, {"TCP_TX_SEG_SIZE", "256K"}).
  std::vector<std::pair<std::string, std::string>> config;
  // For this long after UCX last made progress, an idle wait yields the CPU instead of sleeping:
  // shared-memory traffic needs the peer process's CPU and comes in bursts, and a sleep/wakeup per
  // message costs more than the copy. Zero: always sleep until an event, which is right for
  // socket transports, where the kernel moves the bytes and a spinning process only takes CPU
  // from it (nine spinning processes on two cores left the TCP stack no CPU). Unset: 2 ms, or 0
  // when `transports` names only sockets ("tcp").
  std::optional<std::chrono::microseconds> spin_window;
};

// Creates a UCX transport. Fails with the UCX error (e.g. kNotFound when no requested transport
// is available on this machine).
Result<std::unique_ptr<Transport>> MakeUcxTransport(const UcxOptions& options);

// Allocates and registers `size` bytes through UCX (see the header comment). The region's memory is
// owned by the region and freed when it is destroyed. `transport` must be a UCX transport.
Result<std::unique_ptr<MemoryRegion>> UcxAllocate(Transport& transport, size_t size);

// UCX's description of the lanes (transport, device, purpose) of a UCX connection, as printed by
// ucp_ep_print_info. For diagnostics and tests; empty for a closed or non-UCX connection.
std::string UcxDescribeConnection(Connection& connection);

// UCX's description of the transport's worker (ucp_worker_print_info); empty for a non-UCX one.
std::string UcxDescribeTransport(Transport& transport);

// The memory types this machine's UCX can register and move ("host", and "cuda", "cuda-managed",
// "rocm"... when it was built with them), from a context of its own (ucp_context_query). Device
// memory goes to UCX directly only where "cuda" is listed; elsewhere a rank stages it through the
// host (PlanRankOptions::device).
Result<std::vector<std::string>> UcxMemoryTypes();
// Ok when this UCX lists "cuda"; FailedPrecondition naming the memory types it has and how to get
// a CUDA-aware one otherwise.
Status UcxTakesCudaMemory();

}  // namespace weightport
