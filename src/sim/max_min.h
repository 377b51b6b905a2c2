// Max-min fair sharing of links among flows, by progressive filling: every unfrozen flow's rate
// rises together; a link that fills freezes the flows crossing it at the level reached; a flow
// that reaches its own cap freezes there. The result is the unique max-min fair allocation
// (no flow can gain without taking from a flow whose rate is no higher).
//
// Cost O(F·P·log L) for F flows of path length P over L links: a heap of link fill levels with
// lazy invalidation; each flow is frozen once.
//
// Thread-safety: a solver is used by one thread; it keeps scratch space between calls.
#pragma once

#include <limits>
#include <vector>

namespace weightport::sim {

class MaxMinSolver {
 public:
  static constexpr double kNoCap = std::numeric_limits<double>::infinity();

  explicit MaxMinSolver(std::vector<double> capacity) : capacity_(std::move(capacity)) {}

  // A follower runs no faster than its leaders feed it: rate <= sum of ratio x leader's rate.
  struct Lead {
    int leader;    // flow index; must be in `active`
    double ratio;  // follower bytes per leader byte
  };

  // Sets rate[f] for every f in `active` (other entries untouched). paths[f] lists the links flow
  // f crosses; cap[f] bounds its rate (kNoCap: none). A flow with an empty path and no cap gets
  // kNoCap. `leads` (indexed by flow; empty: no coupling) couples followers to leaders: a
  // follower's cap is known once all its leaders are frozen, and it freezes there if the water
  // level is already above it. That is exact when a follower's leaders freeze no later than it;
  // when a link freezes a follower first, its rate may exceed what its leaders end up feeding it,
  // and the caller clamps it (the simulator's ClampToFeed, then a second solve).
  void Solve(const std::vector<int>& active, const std::vector<std::vector<int>>& paths,
             const std::vector<double>& cap, std::vector<double>& rate,
             const std::vector<std::vector<Lead>>& leads = {});

  const std::vector<double>& capacity() const { return capacity_; }

 private:
  std::vector<double> capacity_;
  // Scratch, sized to the links.
  std::vector<double> remaining_;
  std::vector<int> unfrozen_;
  std::vector<int> version_;
  std::vector<int> first_, next_;  // per link: flows crossing it (entries into entry_flow_)
  std::vector<int> entry_flow_;    // per entry: the index into `active` of the flow crossing
};

}  // namespace weightport::sim
