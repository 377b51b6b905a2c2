// Plan sessions: the engine as a library user (the Python package, an application) drives it.
// Each rank says only what it holds; the plan comes from the rendezvous (plan_rendezvous.h).
//
//   PlanService     the coordinator, on a background thread: collects the layouts, plans once,
//                   accepts the ranks' joins, then runs every version the sources announce
//                   (ReshardCoordinator), until Stop. Usually hosted by source rank 0.
//   PlanPublisher   a source rank. The caller writes its shards (shard(i).bytes), then Publish(v)
//                   hashes them and announces v; Wait(v) gives the verdict. The shards must not be
//                   written while a version is in flight: WaitIdle first.
//   PlanSubscriber  a destination rank. Versions are received and committed in the background;
//                   Acquire pins the live version's shards (a pinned version is never written:
//                   the next update waits up to pin_timeout for pins on the copy it will write,
//                   then fails, and the coordinator aborts that version everywhere).
//
// Thread-safety: every public method may be called from any thread; Close is idempotent.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weightport/control/auth.h"
#include "weightport/engine/common/transport_factory.h"
#include "weightport/engine/rank/plan_rank.h"
#include "weightport/engine/session/plan_rendezvous.h"

namespace weightport {

struct PlanServiceOptions {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;  // 0: any free port (see address())
  RendezvousOptions rendezvous;
  std::chrono::milliseconds join_timeout{60'000};
  std::chrono::milliseconds update_timeout{120'000};
  // ReshardCoordinatorOptions::quorum: 0, every destination verifies each version; N > 0, a lost or
  // failing destination is dropped and the others commit while at least N verified.
  size_t quorum = 0;
  // Keys per version (ReshardCoordinatorOptions::rotate_keys); the ranks join with
  // PlanRankOptions::rotate_keys.
  bool rotate_keys = false;
  std::function<void(std::string)> log;
};

// What one version did, as the coordinator saw it.
struct PlanVersionOutcome {
  uint64_t version = 0;
  bool committed = false;
  std::string reason;  // why it was aborted
  uint64_t bytes = 0;
  double seconds = 0;
  double rekey_seconds = 0;          // rotate_keys: the move of every rank to fresh transports after it
  std::vector<std::string> dropped;  // quorum: the destinations left out, with why
};

class PlanService {
 public:
  // Listens; the rendezvous and the versions run on a background thread.
  static Result<std::unique_ptr<PlanService>> Start(const Secret& secret, PlanServiceOptions options);
  ~PlanService();  // Stop()
  const std::string& address() const;
  // The plan, once the rendezvous made it (null before).
  std::shared_ptr<const Plan> plan() const;
  // Every version run so far, oldest first (a version is listed once every destination reported
  // its commit, a little after the sources heard the verdict).
  std::vector<PlanVersionOutcome> outcomes() const;
  // Waits until `version` is listed; Timeout otherwise, or the service's error if it ended.
  Result<PlanVersionOutcome> WaitForOutcome(uint64_t version, std::chrono::milliseconds timeout) const;
  // The error that ended the service early (rendezvous or joins failed), OK while it runs.
  Status error() const;
  // Says Bye to every rank and stops. Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit PlanService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct PlanMemberOptions {
  std::string coordinator;  // "host:port"
  LayoutOffer offer;        // who this rank is and what it holds
  TransportFactory make_transport;
  PlanRankOptions rank;
  std::chrono::milliseconds connect_timeout{60'000};  // the rendezvous and the join
  std::chrono::milliseconds update_timeout{120'000};  // waits for the coordinator during a version
  std::chrono::milliseconds pin_timeout{30'000};      // subscriber: how long an update waits for pins
  std::function<void(std::string)> log;
};

// A shard of this rank as the plan stores it.
struct PlanShardView {
  std::string tensor;
  DType dtype = DType::kU8;  // as this rank stores it (a destination may convert)
  Shape shape;               // of the whole tensor
  Slice slice;
  std::span<std::byte> bytes;
  // A destination's shard of a tensor quantised to e4m3 in flight (plan/quantized.h): its stored
  // bytes are the e4m3 values, then at `scale_offset` one f32 per block of `scale_blocks` (its box
  // of the tensor's scale grid, row-major), the factor that dequantises the block.
  bool quantized = false;
  uint64_t scale_offset = 0;
  Slice scale_blocks;
};

class PlanPublisher {
 public:
  // Offers the layout, receives the plan, compiles and registers the rank, joins.
  static Result<std::unique_ptr<PlanPublisher>> Join(const Secret& secret, PlanMemberOptions options);
  ~PlanPublisher();
  const Plan& plan() const;
  size_t num_shards() const;
  PlanShardView shard(size_t i);
  // Waits until no version is in flight (the last one's verdict came); its outcome.
  Status WaitIdle(std::chrono::milliseconds timeout);
  // Hashes the shards as `version` (newer than the last) and announces it. Returns at once.
  Status Publish(uint64_t version);
  // The verdict on `version`: OK when committed, Aborted with the coordinator's reason otherwise.
  Status Wait(uint64_t version, std::chrono::milliseconds timeout);
  void Close();

  struct Impl;

 private:
  explicit PlanPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class PlanSubscriber {
 public:
  struct Impl;
  // A pinned version: its shards stay as they are until the pin is released.
  class Pin {
   public:
    Pin() = default;
    Pin(Pin&&) noexcept;
    Pin& operator=(Pin&&) noexcept;
    ~Pin();
    uint64_t version() const { return version_; }
    std::span<const std::byte> shard(size_t i) const { return shards_.at(i); }
    size_t num_shards() const { return shards_.size(); }
    void Release();

   private:
    friend class PlanSubscriber;
    std::shared_ptr<Impl> owner_;  // keeps the arena mapped while pinned, even after Close
    uint64_t version_ = 0;
    std::vector<std::span<const std::byte>> shards_;
  };

  static Result<std::unique_ptr<PlanSubscriber>> Join(const Secret& secret, PlanMemberOptions options);
  ~PlanSubscriber();
  const Plan& plan() const;
  size_t num_shards() const;
  PlanShardView shard_info(size_t i) const;  // bytes empty: read through a Pin
  uint64_t live_version() const;
  // Waits until `version` or a newer one is live; fails at once when the session ended.
  Status WaitForVersion(uint64_t version, std::chrono::milliseconds timeout);
  // Pins the live version. FailedPrecondition before the first commit.
  Result<Pin> Acquire();
  // OK while the session runs or after the coordinator's Bye; the error that ended it otherwise.
  Status session_status() const;
  bool ended() const;
  // Ends the session (the coordinator sees this rank leave). The shards stay mapped until the
  // last Pin is released.
  void Close();

 private:
  explicit PlanSubscriber(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace weightport
