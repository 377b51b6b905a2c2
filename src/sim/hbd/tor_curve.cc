#include "weightport/sim/hbd/tor_curve.h"

#include <algorithm>

#include "weightport/sim/hbd/dp_placement.h"
#include "weightport/sim/hbd/fault_trace.h"
#include "weightport/sim/hbd/tor_orchestrator.h"
#include "weightport/sim/hbd/tp_placement.h"

namespace weightport::sim::hbd {
namespace {

struct Sums {
  double waste = 0, tp_waste = 0, cross = 0, crossing = 0, dp_groups = 0, idle = 0;
  int with_dp = 0;

  Status Add(const ArchSpec& arch, const TpPlacement& p, int dp, int tor_nodes, double borrow,
             const TorCurveOptions& o) {
    WP_ASSIGN_OR_RETURN(DpPlacement d,
                        PlaceDp(arch, p.tp_groups, o.tp, dp, o.tor_gpus, DpPolicy::kTorAware, borrow));
    const double healthy = p.healthy_gpus;
    const double in_dp = static_cast<double>(d.dp_groups) * dp * o.tp;
    waste += healthy > 0 ? (healthy - in_dp) / healthy : 0;
    tp_waste += p.waste_ratio();
    if (d.dp_groups > 0) cross += d.cross_tor_ratio, ++with_dp;
    crossing += CrossingGroups(p.tp_groups, tor_nodes);
    dp_groups += d.dp_groups;
    idle += d.idle_tp_groups;
    return Status::Ok();
  }
  TorCurvePoint Mean(double borrow, int samples) const {
    TorCurvePoint pt;
    pt.borrow_gpus = borrow;
    pt.waste = waste / samples;
    pt.tp_waste = tp_waste / samples;
    if (with_dp > 0) pt.cross_tor = cross / with_dp;
    pt.samples_with_dp = with_dp;
    pt.crossing_tp_groups = crossing / samples;
    pt.dp_groups = dp_groups / samples;
    pt.idle_tp_groups = idle / samples;
    return pt;
  }
};

}  // namespace

Result<TorCurve> EvaluateTorCurve(const ArchSpec& arch, int cluster_nodes, double fault_ratio,
                                  const TorCurveOptions& o) {
  if (!(fault_ratio >= 0 && fault_ratio < 1)) return InvalidArgument("fault ratio must be in [0, 1)");
  if (o.tor_gpus < 1) return InvalidArgument("GPUs per ToR group must be >= 1");
  for (double b : o.borrow_gpus)
    if (!(b >= 0)) return InvalidArgument("borrow thresholds must be >= 0 GPUs");
  TorCurve curve;
  curve.arch = arch.name;
  curve.fault_ratio = fault_ratio;
  curve.dp = o.dp > 0 ? o.dp : AutoDp(arch, o.tor_gpus, o.tp);
  const int tor_nodes = TorNodes(arch, o.tor_gpus);
  const int samples = std::max(1, o.samples);
  const bool ring = arch.kind == ArchKind::kInfiniteHbd && o.tp > arch.gpus_per_node;
  std::vector<Sums> sums(o.borrow_gpus.size());
  Sums greedy;
  FaultDraws draws(cluster_nodes, fault_ratio, o.seed);
  for (int s = 0; s < samples; ++s) {
    const std::vector<char> faulty = draws.Next();
    WP_ASSIGN_OR_RETURN(TpPlacement placed, PlaceTp(arch, faulty, o.tp, /*keep_groups=*/true));
    if (ring) WP_RETURN_IF_ERROR(greedy.Add(arch, placed, curve.dp, tor_nodes, 0, o));
    for (size_t i = 0; i < o.borrow_gpus.size(); ++i) {
      const double b = o.borrow_gpus[i];
      if (ring) {
        WP_ASSIGN_OR_RETURN(TorRingPlacement joint, PlaceRingTorAware(arch, faulty, o.tp, o.tor_gpus, b));
        WP_RETURN_IF_ERROR(sums[i].Add(arch, joint.placement, curve.dp, tor_nodes, b, o));
      } else {
        WP_RETURN_IF_ERROR(sums[i].Add(arch, placed, curve.dp, tor_nodes, b, o));
      }
    }
  }
  for (size_t i = 0; i < sums.size(); ++i) curve.points.push_back(sums[i].Mean(o.borrow_gpus[i], samples));
  if (ring) curve.greedy = greedy.Mean(0, samples);
  return curve;
}

}  // namespace weightport::sim::hbd
