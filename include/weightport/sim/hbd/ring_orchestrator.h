// Stable TP-ring orchestration on InfiniteHBD's k-hop ring as faults come and go.
//
// A greedy re-cut of the whole ring after every fault moves every ring behind the fault; no
// orchestrator would reconfigure that much. This one changes only what a fault touches: the ring
// with a node going down borrows the nearest free healthy node (in no ring) along the ring, on
// the side with fewer rings in between: it and the rings between are torn down and that stretch is
// cut into rings again, one node further along. Nodes are within reach of each other when at most
// K positions apart, whatever lies between them (the k-hop links connect them directly); a run of
// K or more faulty nodes ends a stretch. With no free node within kMaxStretchRings rings, the ring
// stays torn down and its nodes free. A node coming back joins the free nodes and, with free
// nodes within reach, forms new rings when they are enough for one. Every ring built after the
// first placement is one reconfiguration of the optical circuits of its nodes.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/architecture.h"
#include "weightport/sim/hbd/tp_placement.h"

namespace weightport::sim::hbd {

class RingOrchestrator {
 public:
  // The first placement is PlaceTp's greedy cut of the given fault set. Errors: as PlaceTp, and
  // an architecture other than infinitehbd or a TP not spanning whole nodes.
  static Result<RingOrchestrator> Create(const ArchSpec& arch, const std::vector<char>& faulty, int tp);

  // Marks a node down or up and repairs the rings at once.
  void SetFaulty(int node, bool down);

  const std::vector<TpGroup>& rings() const { return rings_; }
  int usable_gpus() const { return static_cast<int>(rings_.size()) * tp_; }
  int healthy_gpus() const { return healthy_nodes_ * arch_.gpus_per_node; }
  double waste_ratio() const;
  int64_t rings_built() const { return rings_built_; }
  int64_t rings_torn_down() const { return rings_torn_down_; }

 private:
  RingOrchestrator(const ArchSpec& arch, int tp, std::vector<char> faulty);
  static constexpr int kMaxStretchRings = 64;
  int Distance(int from, int to) const;  // positions forward from `from` to `to`
  // Rings between `ring` and the nearest free node on its cheaper side; empty when adjacent or
  // when none is within reach.
  std::vector<int> StretchToFreeNode(int ring) const;
  void TearDown(int ring);
  void BuildAround(int node);  // cuts new rings from the chain of free nodes through `node`
  void AddRing(std::vector<int> nodes);

  ArchSpec arch_;
  int tp_ = 0, per_ring_ = 0, healthy_nodes_ = 0;
  std::vector<char> faulty_;
  std::vector<int> ring_of_;  // node -> index in rings_, -1 when free
  std::vector<TpGroup> rings_;
  std::set<int> free_;  // healthy nodes in no ring
  int64_t rings_built_ = 0, rings_torn_down_ = 0;
};

}  // namespace weightport::sim::hbd
