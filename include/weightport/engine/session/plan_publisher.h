// A source rank of a plan session (plan_service.h). The caller writes its shards
// (shard(i).bytes), then Publish(v) hashes them and announces v; Wait(v) gives the verdict. The
// shards must not be written while a version is in flight: WaitIdle first.
//
// Thread-safety: every public method may be called from any thread; Close is idempotent.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "weightport/control/auth.h"
#include "weightport/core/status.h"
#include "weightport/engine/session/plan_member.h"
#include "weightport/plan/plan.h"

namespace weightport {

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
  // Asks the coordinator to roll every destination back to `version` (committed before and kept by
  // them: PlanRankOptions::keep_versions) and waits for the verdict: OK once it is live everywhere,
  // Unavailable with the reason when any destination could not restore it (then the version live
  // before stays live everywhere). Not while a version is in flight; the next Publish must still be
  // newer than every version published.
  Status Rollback(uint64_t version, std::chrono::milliseconds timeout);
  void Close();

  struct Impl;

 private:
  explicit PlanPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightport
