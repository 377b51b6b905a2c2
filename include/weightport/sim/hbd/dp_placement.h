// Data-parallel (DP) grouping of placed TP groups and the DP traffic that crosses a ToR.
//
// The datacenter network beside the HBD is rail-optimised: GPU r of every node under one ToR group
// hangs off that group's leaf switch for rail r, so two GPUs talk through one leaf only when they
// share both the ToR group and the rail. A ToR group is `tor_gpus` GPUs of consecutive nodes
// (rounded to whole NVLink domains or TPU cubes, which a rack never splits).
//
// A job of `dp` replicas (per pipeline stage) needs DP groups of `dp` TP groups; TP rank t of each
// member all-reduces gradients with the same rank of the others. In a ring all-reduce ordered by
// leaf, the ring crosses leaves once per distinct leaf when there is more than one, so the share
// of DP bytes that cross a ToR = sum over DP groups and ranks of (distinct leaves > 1 ? distinct
// leaves : 0) / sum of dp.
//
// Policies: kTorAware sorts the TP groups by the leaves their ranks sit on, makes whole DP groups
// of groups on identical leaves first and cuts the rest in that order (InfiniteHBD's HBD-DCN
// orchestration aligns DP peers under one ToR); kInOrder takes TP groups in placement order.
//
// `borrow_gpus` (B) decides whether a DP group whose traffic crosses leaves is formed at all: it
// saves the dp x tp GPUs it would otherwise leave idle, and costs B GPUs per "crossing", its
// cross edges / tp (mean leaves each rank's all-reduce crosses, counting >= 2 per crossing rank).
// It is formed only when dp x tp > B x edges / tp; otherwise its TP groups idle (DP leftovers).
// B = 0 forms every group (the default); B = infinity forms only groups on one leaf set, so
// cross_tor_ratio is 0.
#pragma once

#include "weightport/core/status.h"
#include "weightport/sim/hbd/architecture.h"
#include "weightport/sim/hbd/tp_placement.h"

namespace weightport::sim::hbd {

enum class DpPolicy : uint8_t { kTorAware, kInOrder };

struct DpPlacement {
  int dp = 0;
  int dp_groups = 0;
  int idle_tp_groups = 0;      // TP groups in no DP group: count mod dp, and declined groups' members
  int declined_groups = 0;     // DP groups not formed: their crossing cost more than borrow_gpus allows
  double cross_tor_ratio = 0;  // meaningful only with dp_groups > 0 and dp > 1
};

// Nodes under one ToR group of this architecture.
int TorNodes(const ArchSpec& arch, int tor_gpus);
// The DP size a job picks when none is given: the TP groups of one fault-free ToR group that sit
// on the same rails (so their rank-t GPUs share a leaf); at least 1.
int AutoDp(const ArchSpec& arch, int tor_gpus, int tp);

// `groups`: every TP group of a placement (PlaceTp with keep_groups). Errors: dp < 1, tor_gpus < 1,
// a group whose ranks do not fit its nodes (first_gpu outside the node, too few nodes for tp).
// Errors also: borrow_gpus negative or NaN.
Result<DpPlacement> PlaceDp(const ArchSpec& arch, const std::vector<TpGroup>& groups, int tp, int dp,
                            int tor_gpus, DpPolicy policy = DpPolicy::kTorAware, double borrow_gpus = 0);

}  // namespace weightport::sim::hbd
