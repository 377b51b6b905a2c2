// A destination rank of a plan session (plan_service.h). Versions are received and committed in
// the background; Acquire pins the live version's shards (a pinned version is never written: the
// next update waits up to pin_timeout for pins on the copy it will write, then fails, and the
// coordinator aborts that version everywhere).
//
// Thread-safety: every public method may be called from any thread; Close is idempotent.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "weightport/control/auth.h"
#include "weightport/core/status.h"
#include "weightport/engine/session/plan_member.h"
#include "weightport/plan/plan.h"

namespace weightport {

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
  // The committed versions kept for a rollback (PlanMemberOptions::rank.keep_versions), oldest
  // first, as of the last commit; and the memory each takes.
  std::vector<uint64_t> kept_versions() const;
  uint64_t kept_bytes() const;
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
