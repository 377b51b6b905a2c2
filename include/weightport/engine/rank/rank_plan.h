// RankPlan: the part of a Plan one rank needs, so that a session of thousands of ranks never sends
// any rank the whole plan. The coordinator plans once, then cuts each rank its part:
//   - the steps it sends, receives or relays, and every step upstream of what it receives (a relay
//     it may have to route around, the root whose hashes it checks), renumbered in plan order;
//   - the tensors those steps and its own shards name, renumbered;
//   - its own buffer whole, and of each peer only the shards its steps touch (offsets kept);
//   - the hosts of those ranks;
//   - each of those ranks' arena layouts and device-copy offsets from the whole plan: a peer's
//     layout depends on steps this rank never sees, so it travels rather than being recomputed.
// The part is itself a valid Plan: PlanRank compiles and runs it as it would the whole one, with
// the same offsets into every peer's arena. `digest` is the whole plan's: every rank of a session
// reports the same one, and the coordinator refuses a rank that planned something else.
//
// Size: a rank's part grows with its own steps (and their relay chains), not with the plan.
//
// Thread-safety: plain values; RankPlanCutter is const after construction and its Cut may run
// on several threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/plan/plan.h"

namespace weightport {
namespace plan_rank_internal {
struct PartTables;  // the peers' layouts and device offsets (rank_plan_tables.h)
}

struct RankPlan {
  Endpoint me;
  uint64_t digest = 0;       // the whole plan's Digest()
  uint64_t whole_steps = 0;  // the whole plan's step count, for logs
  std::shared_ptr<const Plan> plan;
  std::vector<uint32_t> step_ids;  // part step i is the whole plan's step step_ids[i]
  // A source's shards that another source holds with the same slice (source_replicas.h): digested
  // at each Publish for the coordinator to compare.
  std::vector<uint32_t> replicated_shards;
  std::shared_ptr<const plan_rank_internal::PartTables> tables;

  // The ranks of the part other than `me`: the only peers this rank may need.
  std::vector<Endpoint> peers() const;
};

// Cuts parts out of one whole plan. Construction indexes the plan once (O(steps)); each Cut costs
// O(that rank's part).
class RankPlanCutter {
 public:
  explicit RankPlanCutter(std::shared_ptr<const Plan> whole);
  ~RankPlanCutter();
  RankPlanCutter(const RankPlanCutter&) = delete;
  RankPlanCutter& operator=(const RankPlanCutter&) = delete;

  uint64_t digest() const;
  // NotFound when `me` is not a rank of the plan. Not Validate()d: DecodeRankPlan does that.
  Result<RankPlan> Cut(Endpoint me) const;
  // Cuts and encodes the part of each of `ranks` on `threads` threads (the caller's among them)
  // and hands it to `done` with its index in `ranks`, on the thread that cut it: `done` runs
  // concurrently for different ranks. Stops at the first error, of a cut or of `done`.
  Status CutEach(const std::vector<Endpoint>& ranks, size_t threads,
                 const std::function<Status(size_t, RankPlan&&, std::string&&)>& done) const;

 private:
  struct Index;
  std::unique_ptr<Index> index_;
};

// Compiles the part's tables as PlanRank::Create does, with no memory, transport or threads, and
// returns the arena bytes the rank would register: checks and measures a part without the rank.
Result<uint64_t> DryCompile(const RankPlan& part);
// The same from the whole plan, as a rank given the whole plan compiles it.
Result<uint64_t> DryCompile(std::shared_ptr<const Plan> whole, Endpoint me);

std::string EncodeRankPlan(const RankPlan& part);
// Strict: the part plan is Validate()d and the tables must name exactly the part's ranks.
Result<RankPlan> DecodeRankPlan(std::string_view bytes);

}  // namespace weightport
