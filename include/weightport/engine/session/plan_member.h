// What the ranks of a plan session (plan_service.h) share: their options and their view of a
// shard; and the joining that PlanPublisher and PlanSubscriber both do.
//
// Thread-safety: plain structs; a JoinedRank from one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "weightport/control/auth.h"
#include "weightport/core/dtype.h"
#include "weightport/core/slice.h"
#include "weightport/core/status.h"
#include "weightport/core/tensor_meta.h"
#include "weightport/engine/common/transport_factory.h"
#include "weightport/engine/rank/plan_rank.h"
#include "weightport/engine/session/plan_control.h"
#include "weightport/engine/session/plan_rendezvous.h"
#include "weightport/plan/plan.h"
#include "weightport/transport/progress_loop.h"

namespace weightport {

struct PlanMemberOptions {
  std::string coordinator;  // "host:port"
  LayoutOffer offer;        // who this rank is and what it holds
  TransportFactory make_transport;
  PlanRankOptions rank;
  std::chrono::milliseconds connect_timeout{60'000};  // the rendezvous and the join
  std::chrono::milliseconds update_timeout{120'000};  // waits for the coordinator during a version
  std::chrono::milliseconds pin_timeout{30'000};      // subscriber: how long an update waits for pins
  std::function<void(std::string)> log;
  // A coordinator that can fail (PlanServiceOptions::store): where the coordinator is now, waiting
  // up to the timeout for there to be one. With it `coordinator` is unused, and a rank that loses
  // its coordinator asks again, offers its layout to the one that took over and joins it (its part
  // of the new plan must have the same digest), keeping what it holds: a destination's staged
  // version waits for the new coordinator's verdict, a source's announced one is announced again.
  std::function<Result<std::string>(std::chrono::milliseconds timeout)> find_coordinator;
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

// ---- the joining both PlanPublisher and PlanSubscriber do ------------------------------------

// A rank that offered its layout, compiled its part of the plan (rank_plan.h), registered its arena
// and joined the coordinator.
struct JoinedRank {
  std::shared_ptr<const Plan> plan;    // its part: this rank's buffer whole, its steps renumbered
  std::string coordinator;             // the address it joined
  std::unique_ptr<ProgressLoop> loop;  // declared before rank: the rank is destroyed first
  std::unique_ptr<PlanRank> rank;
  std::unique_ptr<PlanControl> member;

  ~JoinedRank();
  // Closes the control connection, then frees the arena, then stops the loop.
  void Reset();
};

// Offers the layout (OfferLayout), compiles the rank from the plan that comes back and joins the
// coordinator (retrying until it listens again, within options.connect_timeout).
Result<std::unique_ptr<JoinedRank>> JoinPlan(const Secret& secret, const PlanMemberOptions& options);

// What find_coordinator gives is "host:port", or "host:port#term" from a coordinator that can
// fail (each term as leader names itself anew, so a rank tells a new term from the one it lost even
// on the same port): the address to dial.
std::string_view ListenAddressOf(std::string_view found);

// A rank whose coordinator at `coordinator` was lost joins the one that took over
// (options.find_coordinator, once it names another address): offers its layout again, checks the
// new plan's digest against its own and joins with its existing rank (PlanRank::Connect to the new
// peer table). Retries until options.connect_timeout; `coordinator` is then the new address.
Result<std::unique_ptr<PlanControl>> RejoinPlan(PlanRank& rank, const Secret& secret,
                                                const PlanMemberOptions& options, std::string& coordinator);

// Whether a rank's coordinator was replaced although its connection is still open: a leader frozen
// (SIGSTOP, a hung host) past its lease keeps its sockets, and only the store tells that the next
// term began. Asks options.find_coordinator at most once per `interval`, briefly; true when the
// store names a coordinator other than `current`. Used by one thread.
class TermWatch {
 public:
  explicit TermWatch(std::function<Result<std::string>(std::chrono::milliseconds)> find,
                     std::chrono::milliseconds interval = std::chrono::milliseconds(1000));
  bool Replaced(const std::string& current);

 private:
  std::function<Result<std::string>(std::chrono::milliseconds)> find_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point next_{};
};

// The views of a rank's shards (`bytes` from `shard_bytes`, empty when null).
PlanShardView ShardView(const Plan& plan, Endpoint me, size_t i, std::span<std::byte> bytes);

}  // namespace weightport
