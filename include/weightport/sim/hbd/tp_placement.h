// Placing tensor-parallel groups on a cluster with faulty nodes, per architecture, and the GPU
// waste that follows: healthy GPUs the job cannot use at its TP size.
//
// InfiniteHBD orchestration: the nodes form a sequence (closed into a ring when the architecture
// wraps). A run of K or more consecutive faulty nodes cannot be crossed and splits the sequence
// into segments; a run of fewer than K is bridged by the k-hop links. In each segment the healthy
// nodes, in order, are cut into TP rings of TP / g nodes; what is left over is waste.
// NVL: per domain, floor(healthy GPUs / TP) groups. TPUv4: a cube with a faulty host is lost to TP;
// a healthy cube holds floor(64 / TP) groups. DGX: floor(8 / TP) groups per healthy node, none when
// TP > 8. Where TP is smaller than a node, groups stay inside nodes.
#pragma once

#include <vector>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/architecture.h"

namespace weightport::sim::hbd {

// A TP group's GPUs: TP rank t sits on node nodes[(first_gpu + t) / g], GPU (first_gpu + t) % g of
// it, for nodes of g GPUs. A group smaller than a node has one node and its offset in first_gpu.
struct TpGroup {
  std::vector<int> nodes;  // in ring order
  int first_gpu = 0;
  bool bridged = false;  // spans faulty nodes between its first and last
};

struct TpPlacement {
  int nodes = 0;
  int healthy_gpus = 0;
  int usable_gpus = 0;
  int groups = 0;
  int bridged_groups = 0;
  int segments = 0;                // infinitehbd: pieces the ring breaks into (1: unbroken)
  std::vector<TpGroup> tp_groups;  // when asked for
  double waste_ratio() const {
    return healthy_gpus > 0 ? static_cast<double>(healthy_gpus - usable_gpus) / healthy_gpus : 0;
  }
};

// faulty[i]: node i is down. Errors: tp < 1; TP not a multiple of the node size (or a divisor of
// it) where groups span nodes.
Result<TpPlacement> PlaceTp(const ArchSpec& arch, const std::vector<char>& faulty, int tp,
                            bool keep_groups = false);

// Pieces of InfiniteHBD's ring placement, shared with the ToR-aware one (tor_orchestrator.h).
// Where a walk round the ring starts: right after its first run of >= K faulty nodes, where the
// ring breaks (it has ends there); else node 0 of a ring still whole. A line (!arch.wrap) is broken.
struct RingWalkStart {
  int start = 0;
  bool broken = false;
};
RingWalkStart RingStart(const ArchSpec& arch, const std::vector<char>& faulty);
// Adds the TP ring of `nodes` (in ring order, on a ring of n nodes of g GPUs) to p: counted, its GPUs
// usable, bridged where its nodes are not consecutive; kept in tp_groups with `keep`.
void AddRing(std::vector<int> nodes, int n, int g, bool keep, TpPlacement& p);

}  // namespace weightport::sim::hbd
