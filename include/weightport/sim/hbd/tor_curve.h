// The trade-off between GPU waste and DP traffic crossing a ToR, per architecture: one point per
// borrow threshold B (GPUs of waste a crossing must save, see tor_orchestrator.h and
// dp_placement.h), at a node fault ratio.
//
// Every architecture is measured the same way. ToR groups are `tor_gpus` GPUs of consecutive nodes
// (a multiple of every domain, so every architecture's are the same size). The waste of the job is
// (healthy GPUs - GPUs in formed DP groups) / healthy GPUs: GPUs in no TP group and TP groups in no
// DP group (the count mod DP, and DP groups declined for their crossings) alike. The cross-ToR share
// counts formed DP groups only, over samples that have one. InfiniteHBD (TP spanning nodes) places
// its rings with PlaceRingTorAware(B) and groups them with PlaceDp(B); the other architectures'
// TP groups cannot move, so B acts on their DP grouping only. The ring also gets today's greedy
// cut (PlaceTp) grouped with B = 0, as a reference point.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/architecture.h"

namespace weightport::sim::hbd {

struct TorCurvePoint {
  double borrow_gpus = 0;           // infinity: never cross
  double waste = 0;                 // mean job waste, DP leftovers included
  double tp_waste = 0;              // mean share of healthy GPUs in no TP group
  std::optional<double> cross_tor;  // mean over samples with a DP group; none when no sample had one
  int samples_with_dp = 0;
  double crossing_tp_groups = 0;  // mean TP groups with nodes under more than one ToR group
  double dp_groups = 0;           // mean DP groups formed
  double idle_tp_groups = 0;      // mean TP groups in no formed DP group
};

struct TorCurve {
  std::string arch;
  double fault_ratio = 0;
  int dp = 0;
  std::vector<TorCurvePoint> points;    // in the order of TorCurveOptions::borrow_gpus
  std::optional<TorCurvePoint> greedy;  // infinitehbd with TP spanning nodes: PlaceTp's cut, B = 0
};

struct TorCurveOptions {
  int tp = 16;
  int dp = 0;  // 0: AutoDp(arch, tor_gpus, tp)
  int tor_gpus = 576;
  std::vector<double> borrow_gpus;
  int samples = 20;
  uint64_t seed = 1;
};

// Means over `samples` draws of round(ratio x nodes) faulty nodes (the draws EvaluateAtFaultRatio
// makes for the same seed); every threshold sees the same draws.
Result<TorCurve> EvaluateTorCurve(const ArchSpec& arch, int cluster_nodes, double fault_ratio,
                                  const TorCurveOptions& options);

}  // namespace weightport::sim::hbd
