// FakeTransport: an in-process Transport for tests. Transports made on one FakeFabric reach each
// other's registered memory with memcpy, and exchange control messages through in-memory inboxes.
//
// It follows the Transport contract (transport.h) strictly, so code tested on it behaves the same on
// UCX: Put/Get/Flush/Send are validated when issued (an invalid one fails at once), queued, and
// executed in order on the initiator's next Progress() (never inside the call); a message lands in
// the receiver's inbox and its handler runs inside the RECEIVER's Progress(). A transport that was
// closed or destroyed is a lost peer: operations towards it fail with kUnavailable naming it.
//
// Thread-safety: FakeFabric is thread-safe. Each FakeTransport follows the Transport threading
// model (one owning thread, normally a ProgressLoop); transports on different threads may use the
// same fabric concurrently. Keys, addresses and data pointers never leave the process.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "weightport/core/status.h"
#include "weightport/transport/transport.h"

namespace weightport {

struct FakeOptions {
  // Added to every Put, Get, Flush and Send before it executes (0: on the next Progress()).
  std::chrono::microseconds latency{0};
  size_t max_message_bytes = 64 * 1024;
  // Connection::Map hands out peers' regions, as UCX does for a same-host peer: the region stays
  // registered (its deregistration waits) while a mapping of it lives.
  bool mappable = false;
};

// The "network" shared by the fake transports of one test: every live transport and every
// registered region, by fabric-unique id. Addresses and keys from another fabric are refused.
class FakeFabric {
 public:
  FakeFabric();
  ~FakeFabric();
  FakeFabric(const FakeFabric&) = delete;
  FakeFabric& operator=(const FakeFabric&) = delete;

  // Introspection for tests.
  size_t live_transports() const;     // made and not yet destroyed
  size_t registered_regions() const;  // registered and not yet deregistered

  struct State;  // defined in fake_transport.cc
  const std::shared_ptr<State>& state() const { return state_; }

 private:
  std::shared_ptr<State> state_;  // shared with regions, which may outlive the fabric object
};

// Makes a transport named `name` (used as the `from` of its messages) on `fabric`.
Result<std::unique_ptr<Transport>> MakeFakeTransport(std::shared_ptr<FakeFabric> fabric, std::string name,
                                                     FakeOptions options = {});

}  // namespace weightport
