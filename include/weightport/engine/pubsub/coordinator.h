// WholeCoordinator: the control plane of one model's updates. Publishers and subscribers connect to it
// over authenticated control channels (control/channel.h); it tells subscribers where the
// publisher's weights are (RegionKeys), what the next version holds (Manifest) and when to fetch it
// (UpdateBegin), collects their verdicts, and commits a version only once every subscriber of the
// update has verified every chunk it asked for. It moves no weights itself.
//
// Message flow of one version v:
//   publisher  -> coordinator   RegionKeys (when its regions change), Manifest(v), UpdateBegin(v)
//   coordinator -> subscribers  RegionKeys (if not yet seen), Manifest(v), UpdateBegin(v)
//   subscriber -> coordinator   StagingReady once, after its first RegionKeys (sent when it joins, or
//                               when the publisher's first arrive): its staging memory is ready
//   subscriber -> coordinator   ChunksVerified(v) | UpdateFailed(v, why)
//   coordinator -> all          Commit(v) once every member verified | Abort(v, why) otherwise
//   subscriber -> coordinator   Committed(v, pause) after its swap
// The members of an update are the subscribers connected when it began; a subscriber that joins
// later takes part from the next version. Only one version is in flight at a time; a publisher
// starting another one meanwhile, or an older one, gets an Abort naming the version in flight.
//
// Commit policy (WholeCoordinatorOptions::quorum): all or nothing by default; with a quorum, a failing
// member is dropped from the version instead of aborting it for everyone.
//
// Failure handling: every peer sends a message at least every heartbeat interval; one silent for
// peer_timeout, or whose connection fails, is lost, named in the log, and removed. A lost member
// aborts the update in flight, naming it; so does an update not verified within update_timeout
// (naming the subscribers that had not verified), a subscriber's UpdateFailed, and a lost
// publisher. A subscriber asking (PlacementMsg) for a tensor the publisher's manifest lacks is
// refused with an error naming the tensor, and the update goes on without it.
//
// Embedded in the publisher by default (publisher.h); `weightport serve` runs it standalone.
//
// Thread-safety: all public methods may be called from any thread. Internally one thread accepts
// connections and checks deadlines, and one thread per peer reads its channel.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/control/auth.h"
#include "weightport/control/channel.h"
#include "weightport/core/status.h"

namespace weightport {

class Metrics;

struct WholeCoordinatorOptions {
  std::string name = "coordinator";
  std::chrono::milliseconds heartbeat_interval{1000};  // how often it pings every peer
  std::chrono::milliseconds peer_timeout{10'000};      // silence after which a peer is lost
  std::chrono::milliseconds update_timeout{300'000};   // UpdateBegin to every member verified
  // Commit policy. 0: all or nothing (every member of an update must verify it). N > 0: a member
  // that is lost, fails the update or misses update_timeout is dropped from it (told Abort for
  // itself, named in the report) and the version commits to the members that verified, as long as
  // at least N remain; fewer, and it is aborted for everyone.
  size_t quorum = 0;
  // One line per event worth a log (peer joined, refused, lost; version committed, aborted).
  std::function<void(std::string)> log;
  Metrics* metrics = nullptr;  // optional; must outlive the coordinator
  ControlOptions control;      // its log defaults to `log`
};

// What one subscriber did for one version.
struct WholeSubscriberVersionReport {
  std::string name;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  uint64_t retries = 0;
  std::chrono::nanoseconds fetch{0};  // its first Get to its last chunk verified
  std::chrono::nanoseconds pause{0};  // how long its readers were blocked by the swap
  // In the first version it is a member of: the staging memory it prepared when it joined (pages
  // zero-filled, registered, the publisher's region mapped) and how long that took, before this
  // version began (its StagingReady).
  uint64_t staging_bytes = 0;
  std::chrono::nanoseconds staging_prepare{0};
  bool verified = false;
  bool committed = false;  // it reported its swap (Committed)
  std::string dropped;     // quorum policy: why it was dropped from the version (empty: it was not)
};

struct VersionReport {
  uint64_t version = 0;
  uint64_t model_bytes = 0;
  Status outcome;                    // OK once committed; the Abort reason otherwise
  bool decided = false;              // committed or aborted
  std::chrono::nanoseconds copy{0};  // UpdateBegin sent to the last member verified
  std::vector<WholeSubscriberVersionReport> subscribers;
};

class WholeCoordinator {
 public:
  // Listens on host:port (port 0: any free port) and starts serving.
  static Result<std::unique_ptr<WholeCoordinator>> Start(std::string_view host, uint16_t port,
                                                         const Secret& secret,
                                                         WholeCoordinatorOptions options = {});
  ~WholeCoordinator();  // Stop()
  WholeCoordinator(const WholeCoordinator&) = delete;
  WholeCoordinator& operator=(const WholeCoordinator&) = delete;

  // Says Bye to every peer, closes every channel and joins every thread. Idempotent.
  void Stop();

  const std::string& address() const;  // "127.0.0.1:41234"
  uint16_t port() const;

  // Waits until at least `n` subscribers are connected. Timeout names how many there were.
  Status WaitForSubscribers(size_t n, std::chrono::milliseconds timeout);
  // Names of the connected subscribers, in the order they joined.
  std::vector<std::string> Subscribers() const;

  // Waits until `version` is decided and, if committed, every member not dropped reported its swap (or
  // `timeout` passes: then the report so far). NotFound for a version never begun.
  Result<VersionReport> WaitForVersion(uint64_t version, std::chrono::milliseconds timeout);

  struct Impl;

 private:
  explicit WholeCoordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightport
