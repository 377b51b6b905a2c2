// WholeSubscriber: receives every version a coordinator commits and serves it to local readers.
//
// For each UpdateBegin it checks the version's manifest against the layout it holds (a version
// whose tensors differ in name, dtype or shape is refused with UpdateFailed before anything is
// written), opens the staging buffer of its VersionedStore, fetches every chunk it wants from the
// publisher's region with a FetchExecutor (bounded window, backoff, xxh3 check, corrupt chunks
// fetched again) and reports ChunksVerified, or UpdateFailed naming the chunk and peer. On Commit it
// swaps (per its SwapMode) and reports Committed with the readers' pause; on Abort it abandons the
// staging copy and the previous version stays live and bit-exact.
//
// Memory: the store's buffers (one or two copies of the model, per the swap mode) are registered
// once each; nothing else grows with the model.
//
// Thread-safety: every public method may be called from any thread. Internally one thread runs the
// control session and one ProgressLoop owns the transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weightport/control/auth.h"
#include "weightport/core/manifest.h"
#include "weightport/core/status.h"
#include "weightport/engine/common/transport_factory.h"
#include "weightport/engine/pubsub/fetch_executor.h"
#include "weightport/engine/pubsub/versioned_store.h"

namespace weightport {

struct WholeSubscriberEvent {
  enum class Kind { kBegin, kVerified, kFailed, kCommitted, kAborted };
  Kind kind = Kind::kBegin;
  uint64_t version = 0;
  uint64_t bytes = 0;                 // kVerified: bytes fetched
  uint64_t retries = 0;               // kVerified
  uint64_t direct_chunks = 0;         // kVerified: chunks copied from the publisher's mapped memory
  uint64_t yields = 0;                // kVerified: times a background fetch began to yield to other traffic
  std::chrono::nanoseconds fetch{0};  // kVerified: first Get to last chunk verified
  std::chrono::nanoseconds pause{0};  // kCommitted
  std::string detail;                 // kFailed / kAborted: why; kBegin: chunks changed (delta)
};

struct WholeSubscriberOptions {
  std::string name = "subscriber";
  std::string coordinator;  // "host:port"
  SwapMode swap_mode = SwapMode::kDoubleBuffer;
  TransportFactory make_transport;  // required
  FetchOptions fetch;
  std::vector<std::string> tensors;  // fetch only these; empty: the whole model
  // Fetch only the chunks whose hash changed since the version held; the rest is copied from the
  // live copy (or, in place, left where it is) and checked against its hash. Off, or with
  // fetch.verify off: every chunk of every version travels.
  bool delta = true;
  SessionTiming timing;
  std::chrono::milliseconds swap_wait_timeout{10'000};  // for readers' pins to drain
  std::function<void(std::string)> log;
  // Called on an internal thread for each step of each version (progress, tests). Must not block
  // long or call back into the subscriber.
  std::function<void(const WholeSubscriberEvent&)> on_event;
};

class WholeSubscriber {
 public:
  // Connects and authenticates; the session then runs in the background.
  static Result<std::unique_ptr<WholeSubscriber>> Connect(const Secret& secret,
                                                          WholeSubscriberOptions options);
  ~WholeSubscriber();  // Close()
  WholeSubscriber(const WholeSubscriber&) = delete;
  WholeSubscriber& operator=(const WholeSubscriber&) = delete;

  // Pins the live version (see VersionedStore::Acquire). FailedPrecondition before the first commit.
  Result<VersionedStore::Pin> Acquire();
  uint64_t live_version() const;
  // The manifest of the live version (FailedPrecondition before the first commit).
  Result<Manifest> LiveManifest() const;

  // Waits until `version` (or a newer one) is live. Fails at once when the session has ended with
  // an error (refused, coordinator lost), naming it; Timeout after `timeout`.
  Status WaitForVersion(uint64_t version, std::chrono::milliseconds timeout);
  // Waits until the session ends: OK when the coordinator said Bye, its error otherwise.
  Status WaitForEnd(std::chrono::milliseconds timeout);

  // Says Bye, cancels a fetch in flight (the live version stays), deregisters, stops. Idempotent.
  void Close();

  struct Impl;

 private:
  explicit WholeSubscriber(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightport
