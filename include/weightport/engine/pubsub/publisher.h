// WholePublisher: holds a model's weights in one registered arena and publishes versions of them to the
// subscribers of a coordinator, which fetch them with one-sided Gets (publisher's CPU not involved).
//
// The trainer (or whatever produces weights) writes `weights()` — every tensor at its Manifest
// offset — and calls Publish(version, mode):
//   kLive      subscribers fetch straight from the live weights. Publish hashes them, starts the
//              update and returns only once it is committed or aborted: the trainer must not
//              write its weights until then. report.hold is that whole time.
//   kSnapshot  Publish copies the weights into a second arena (one local memcpy) and returns; the
//              trainer resumes at once while hashing and the transfer run in the background,
//              overlapped with its next steps. A later Publish first waits for the one in flight.
//              report.hold is the wait plus the copy. Wait(version) gives the outcome.
// With options.rotate_keys every version is served from memory and a transport of its own (a
// grant): Publish copies the weights into the grant (as kSnapshot does), sends the coordinator the
// grant's address and key, and retires the grant once the version is decided (committed, aborted or
// timed out): its region is released and its transport closed, so the keys a peer held for that
// version stop working, also for a peer that was dropped from it and still tries. The live weights
// are then plain memory no peer is given a key to. Cost per version: the copy and a transport start.
// By default the publisher embeds its coordinator (coordinator() is non-null); with
// options.coordinator set it joins a standalone one (`weightport serve`).
//
// Thread-safety: Publish, Wait and Close from one thread at a time (the trainer's); weights() may be
// written by the trainer between Publish calls (in kLive mode only while none is in progress).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/control/auth.h"
#include "weightport/core/manifest.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"
#include "weightport/engine/common/transport_factory.h"
#include "weightport/engine/pubsub/coordinator.h"

namespace weightport {

enum class PublishMode { kLive, kSnapshot };
std::string_view PublishModeName(PublishMode mode);  // "live", "snapshot"
Result<PublishMode> ParsePublishMode(std::string_view name);

struct WholePublisherOptions {
  std::string name = "publisher";
  // "host:port" of a standalone coordinator; empty: start an embedded one on listen_host:listen_port.
  std::string coordinator;
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;
  WholeCoordinatorOptions coordinator_options;  // for the embedded one
  TransportFactory make_transport;              // required
  uint64_t chunk_size = kDefaultChunkSize;
  SessionTiming timing;
  std::chrono::milliseconds update_timeout{300'000};  // Publish / Wait give up after this
  bool rotate_keys = false;  // a grant (memory, transport, keys) per version, retired when decided
  std::function<void(std::string)> log;
};

// Asks the coordinator to hold a version until `at_least` subscribers are connected and have their
// staging memory ready (mapped and zero-filled when they joined, so that the version moves bytes
// instead of paying page faults), for at most `within`; fewer by then aborts the version, naming how
// many came. Works with an embedded and a standalone coordinator alike.
struct WholeSubscriberWait {
  size_t at_least = 0;
  std::chrono::milliseconds within{0};
};

struct PublishReport {
  uint64_t version = 0;
  uint64_t bytes = 0;
  Status outcome;                             // OK: committed; otherwise why it was not
  uint64_t subscribers = 0;                   // committed: how many subscribers made it live
  std::chrono::nanoseconds hold{0};           // how long Publish kept the trainer from its weights
  std::chrono::nanoseconds snapshot_copy{0};  // kSnapshot or rotate_keys: the local copy
  std::chrono::nanoseconds grant{0};          // rotate_keys: the version's transport and region
  std::chrono::nanoseconds hash{0};           // building the manifest
  std::chrono::nanoseconds transfer{0};       // UpdateBegin sent to the verdict received
};

class WholePublisher {
 public:
  static Result<std::unique_ptr<WholePublisher>> Create(std::vector<TensorMeta> tensors, const Secret& secret,
                                                        WholePublisherOptions options);
  ~WholePublisher();  // Close()
  WholePublisher(const WholePublisher&) = delete;
  WholePublisher& operator=(const WholePublisher&) = delete;

  // The live weights: every tensor at its offset in the version's flat byte space.
  std::span<std::byte> weights();
  std::span<std::byte> TensorData(std::string_view name);  // empty when there is no such tensor
  const std::vector<TensorMeta>& tensors() const;
  uint64_t model_bytes() const;

  // The embedded coordinator, or null when joined to a standalone one.
  WholeCoordinator* coordinator();
  const std::string& coordinator_address() const;

  // Publishes the weights as `version` (see the modes above). Errors: the version is not newer,
  // a snapshot publish still in flight failed to finish in time, the coordinator is lost. A version
  // the coordinator aborts is not an error of the call: report.outcome says why.
  Result<PublishReport> Publish(uint64_t version, PublishMode mode, WholeSubscriberWait wait = {});
  // Waits for the outcome of a version published with kSnapshot (or returns a kLive one's).
  Result<PublishReport> Wait(uint64_t version, std::chrono::milliseconds timeout);

  // Says Bye, stops the embedded coordinator, deregisters and frees the arenas. Idempotent.
  void Close();

  struct Impl;

 private:
  explicit WholePublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightport
