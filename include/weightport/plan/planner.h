// The planner: a pure function from (source placement, destination placement, topology, options)
// to a Plan. No I/O, no clocks, no randomness: the same input gives the same plan, byte for byte.
//
// What it guarantees (checked by CheckCoverage and the property tests):
//   - coverage: every byte of every destination shard is written by exactly one step;
//   - a step from a source sends only what that source holds; a relay step sends only what an
//     earlier step delivered to the relay;
//   - balance: a piece several sources hold goes to the one whose NIC is least loaded (large pieces
//     are first split among them), so the busiest NIC carries as little as greedy assignment finds;
//   - locality: a destination rank on the same host as a source holding a piece copies it locally;
//   - fan-out: the other destination ranks needing the same slice (replicas) get it from the
//     sources once and relay it among themselves in a chain or tree (options.relay_fanout); each
//     piece's chain starts where it leaves the busiest host least busy, so every replica relays
//     its share.
//
// Thread-safety: reentrant.
#pragma once

#include "weightport/core/placement.h"
#include "weightport/core/status.h"
#include "weightport/plan/plan.h"
#include "weightport/plan/topology.h"

namespace weightport {

// The most pieces and steps a plan may have (a step costs ~150 bytes): counted before they are
// made, so that a hostile pair of layouts fails with an error instead of exhausting memory.
inline constexpr uint64_t kMaxPlanSteps = uint64_t{1} << 22;

// Errors: either placement invalid; the two disagree on a tensor (missing, dtype, shape); a
// destination element no source holds (named: tensor and region); bad options; more than
// kMaxPlanSteps pieces or steps.
Result<Plan> MakePlan(const Placement& src, const Placement& dst, const Topology& topology,
                      const PlanOptions& options = {});

// Independent check of a plan's coverage, for tests and `plan --check`: Validate() (every step's
// piece inside its sender's and receiver's shards; a relay's `after` delivers that piece to it),
// then per destination shard: its steps' pieces are pairwise disjoint and add up to the whole
// shard, so every byte is written exactly once. Pairs are tested only where bounding intervals meet.
Status CheckCoverage(const Plan& plan);

// Recomputes the estimate of a plan's steps (MakePlan does this; after editing steps, call again).
PlanEstimate EstimatePlan(const Plan& plan);

}  // namespace weightport
