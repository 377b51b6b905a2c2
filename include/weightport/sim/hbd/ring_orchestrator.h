// Stable TP-ring orchestration on InfiniteHBD's k-hop ring as faults come and go.
//
// A greedy re-cut of the whole ring after every fault moves every ring behind the fault; no
// orchestrator would reconfigure that much. This one changes only what a fault touches: the ring
// with a node going down borrows the nearest free healthy node (in no ring) along the ring, on
// the side with fewer rings in between: it and the rings between are torn down and that stretch is
// cut into rings again, one node further along. Nodes are within reach of each other when at most
// K positions apart, whatever lies between them (the k-hop links connect them directly); a run of
// K or more faulty nodes ends a stretch. With no free node within max_stretch rings, the ring
// stays torn down and its nodes free. A node coming back joins the free nodes; when they are
// enough for one more ring, the rings between it and the nearest TP/g - 1 other free nodes are
// re-cut with them (a gather: the mirror of the borrow). Every ring built after the first
// placement is one reconfiguration of the optical circuits of its nodes.
#pragma once

#include <cstdint>
#include <optional>
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
  // max_stretch: the most rings one borrow or gather may rebuild (fewer: fewer reconfigurations,
  // more idle nodes).
  static Result<RingOrchestrator> Create(const ArchSpec& arch, const std::vector<char>& faulty, int tp,
                                         int max_stretch = 64);

  // Marks a node down or up and repairs the rings at once.
  void SetFaulty(int node, bool down);

  const std::vector<TpGroup>& rings() const { return rings_; }
  int usable_gpus() const { return static_cast<int>(rings_.size()) * tp_; }
  int healthy_gpus() const { return healthy_nodes_ * arch_.gpus_per_node; }
  double waste_ratio() const;
  int64_t rings_built() const { return rings_built_; }
  int64_t rings_torn_down() const { return rings_torn_down_; }

 private:
  RingOrchestrator(const ArchSpec& arch, int tp, int max_stretch, std::vector<char> faulty);
  int Distance(int from, int to) const;  // positions forward from `from` to `to`
  // The position one step in direction `dir` (+1, -1); none past an end of an unwrapped ring.
  std::optional<int> Step(int pos, int dir) const;
  // Rings (other than `own`) passed walking from `pos` in direction `dir` until `needed` free
  // healthy nodes are passed; nullopt when a run of >= K faulty nodes, max_stretch rings or
  // a full turn comes first.
  std::optional<std::vector<int>> WalkToFree(int pos, int dir, int needed, int own) const;
  // The shorter of the walks forward from `forward_from` and backward from `backward_from`.
  std::optional<std::vector<int>> Stretch(int forward_from, int backward_from, int needed, int own) const;
  // Tears the rings down and cuts their healthy nodes, with the free nodes they reach, again.
  void Rebuild(std::vector<int> rings);
  void TearDown(int ring);
  void BuildAround(int node);  // cuts new rings from the chain of free nodes through `node`
  void AddRing(std::vector<int> nodes);

  ArchSpec arch_;
  int tp_ = 0, per_ring_ = 0, max_stretch_ = 64, healthy_nodes_ = 0;
  std::vector<char> faulty_;
  std::vector<int> ring_of_;  // node -> index in rings_, -1 when free
  std::vector<TpGroup> rings_;
  std::set<int> free_;  // healthy nodes in no ring
  int64_t rings_built_ = 0, rings_torn_down_ = 0;
};

}  // namespace weightport::sim::hbd
