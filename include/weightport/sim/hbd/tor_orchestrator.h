// A ToR-aware placement of InfiniteHBD's TP rings: rings are cut inside each ToR group of the
// rail-optimised DCN where possible, so that DP groups can be formed of rings under one ToR.
//
// The healthy nodes of the ring, in ring order, fall into blocks: consecutive healthy nodes of one
// ToR group with no run of >= K faulty nodes between them (a run of fewer than K is bridged by the
// k-hop links, as in PlaceTp). A block ends at a ToR boundary (soft) or at such a run (hard). Rings
// are cut greedily inside blocks; at a soft boundary the ring being filled, r nodes of the block
// before, either ends there (its r nodes are wasted) or borrows the first nodes of the next block
// and crosses the boundary. A hard boundary always ends it. The choice at every soft boundary
// minimises
//
//     wasted GPUs + borrow_gpus x (ToR boundaries crossed by rings)
//
// by dynamic programming over the remainder r (0 .. TP/g - 1) at each boundary (and, for a ring
// with no run of >= K faults, over the remainder carried round the wrap), ties going to fewer
// crossings. So a ring crosses a ToR boundary only where that saves more than borrow_gpus GPUs of
// waste: borrow_gpus = infinity never crosses (each ToR group cut on its own), borrow_gpus = 0 gives
// the least waste (that of PlaceTp's greedy cut, which ignores ToR boundaries) with the fewest
// crossings. As borrow_gpus grows, the crossings never rise and the waste never falls (a
// Lagrangian relaxation: optimal at B1 < B2, w1 + B1 c1 <= w2 + B1 c2 and w2 + B2 c2 <= w1 + B2 c1
// give c1 >= c2 and w1 <= w2).
#pragma once

#include <vector>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/architecture.h"
#include "weightport/sim/hbd/tp_placement.h"

namespace weightport::sim::hbd {

struct TorRingPlacement {
  TpPlacement placement;       // with tp_groups
  int crossing_rings = 0;      // rings with nodes under more than one ToR group
  int boundary_crossings = 0;  // ToR boundaries crossed, summed over rings
};

// Errors: arch not infinitehbd, tor_gpus < 1, borrow_gpus negative or NaN, TP not a multiple of the
// node size (TP within a node places as PlaceTp does: no ring crosses anything).
Result<TorRingPlacement> PlaceRingTorAware(const ArchSpec& arch, const std::vector<char>& faulty, int tp,
                                           int tor_gpus, double borrow_gpus);

// TP groups with nodes under more than one ToR group of `tor_nodes` nodes.
int CrossingGroups(const std::vector<TpGroup>& groups, int tor_nodes);

}  // namespace weightport::sim::hbd
