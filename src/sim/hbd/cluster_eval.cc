#include "weightport/sim/hbd/cluster_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <numeric>
#include <optional>

#include "weightport/sim/hbd/ring_orchestrator.h"
#include "weightport/sim/hbd/tp_placement.h"

namespace weightport::sim::hbd {
namespace {

int DpSize(const ArchSpec& arch, const EvalOptions& o) {
  return o.dp > 0 ? o.dp : AutoDp(arch, o.tor_gpus, o.tp);
}

// Collects per-sample figures and turns them into ClusterMetrics.
struct Samples {
  std::vector<double> waste, cross_tor, waste_recut;
  double fault_sum = 0;

  int dp = 1;

  Status Add(const ArchSpec& arch, const std::vector<TpGroup>& groups, double waste_ratio, double fault_ratio,
             const EvalOptions& o) {
    WP_ASSIGN_OR_RETURN(DpPlacement placed, PlaceDp(arch, groups, o.tp, dp, o.tor_gpus, o.dp_policy));
    waste.push_back(waste_ratio);
    // A sample with no DP group has no DP traffic to count: it is left out, not counted as 0.
    last_had_cross = placed.dp_groups > 0;
    if (last_had_cross) cross_tor.push_back(placed.cross_tor_ratio);
    fault_sum += fault_ratio;
    return Status::Ok();
  }
  // The previous sample's figures again (nothing changed since).
  void Repeat(double fault_ratio) {
    waste.push_back(waste.back());
    if (last_had_cross) cross_tor.push_back(cross_tor.back());
    if (!waste_recut.empty()) waste_recut.push_back(waste_recut.back());
    fault_sum += fault_ratio;
  }
  bool last_had_cross = false;
  ClusterMetrics Finish() {
    ClusterMetrics m;
    m.samples = static_cast<int>(waste.size());
    m.dp = dp;
    m.mean_fault_ratio = waste.empty() ? 0 : fault_sum / waste.size();
    m.waste = Summarise(std::move(waste));
    if (!cross_tor.empty()) m.cross_tor = Summarise(std::move(cross_tor));
    if (!waste_recut.empty()) m.waste_recut = Summarise(std::move(waste_recut));
    return m;
  }
};

// Rings each greedy re-cut has that the previous sample's re-cut did not: the rebuilds of an
// orchestrator that re-cut the whole ring at every sample.
struct RecutCounter {
  std::vector<std::vector<int>> previous;  // sorted; empty before the first sample
  int64_t rebuilt = 0;

  void Add(std::vector<TpGroup>& groups) {
    std::vector<std::vector<int>> cut;
    for (TpGroup& g : groups) cut.push_back(std::move(g.nodes));
    std::sort(cut.begin(), cut.end());
    if (!previous.empty()) {
      std::vector<std::vector<int>> added;
      std::set_difference(cut.begin(), cut.end(), previous.begin(), previous.end(),
                          std::back_inserter(added));
      rebuilt += static_cast<int64_t>(added.size());
    }
    previous = std::move(cut);
  }
};

bool Orchestrated(const ArchSpec& arch, int tp) {
  return arch.kind == ArchKind::kInfiniteHbd && tp > arch.gpus_per_node;
}

}  // namespace

Percentiles Summarise(std::vector<double> values) {
  Percentiles s;
  if (values.empty()) return s;
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {
    return values[std::min(values.size() - 1, static_cast<size_t>(q * (values.size() - 1) + 0.5))];
  };
  s.p50 = at(0.5), s.p99 = at(0.99), s.max = values.back();
  return s;
}

double ReconfigurationSeconds(const ArchSpec& arch) {
  switch (arch.kind) {
    case ArchKind::kInfiniteHbd:
      return 80e-6;
    case ArchKind::kTpuV4:
      return 10e-3;
    default:
      return 0;
  }
}

Result<ClusterMetrics> EvaluateAtFaultRatio(const ArchSpec& arch, int cluster_nodes, double ratio,
                                            int samples, uint64_t seed, const EvalOptions& options) {
  if (!(ratio >= 0 && ratio < 1)) return InvalidArgument("fault ratio must be in [0, 1)");
  FaultDraws draws(cluster_nodes, ratio, seed);
  Samples s;
  s.dp = DpSize(arch, options);
  for (int i = 0; i < std::max(1, samples); ++i) {
    WP_ASSIGN_OR_RETURN(TpPlacement p, PlaceTp(arch, draws.Next(), options.tp, /*keep_groups=*/true));
    WP_RETURN_IF_ERROR(s.Add(arch, p.tp_groups, p.waste_ratio(),
                             static_cast<double>(draws.down()) / std::max(1, cluster_nodes), options));
  }
  return s.Finish();
}

Result<int64_t> TraceSamples(const FaultTrace& trace, double sample_days) {
  if (!(sample_days > 0) || !std::isfinite(sample_days))
    return InvalidArgument("the sampling interval must be > 0 days");
  const double samples = std::floor(trace.days / sample_days) + 1;
  if (!(samples <= static_cast<double>(kMaxTraceSamples))) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "a trace of %g days sampled every %g days takes %.3g samples, over the limit of %lld: "
                  "sample less often",
                  trace.days, sample_days, samples, static_cast<long long>(kMaxTraceSamples));
    return InvalidArgument(text);
  }
  return static_cast<int64_t>(samples);
}

Result<ClusterMetrics> EvaluateTrace(const ArchSpec& arch, int cluster_nodes, const FaultTrace& trace,
                                     const std::vector<std::vector<int>>& positions, double sample_days,
                                     const EvalOptions& options,
                                     std::vector<std::pair<double, double>>* series) {
  WP_RETURN_IF_ERROR(TraceSamples(trace, sample_days).status());
  if (positions.size() != trace.node_ids.size())
    return InvalidArgument("the trace has " + std::to_string(trace.node_ids.size()) + " nodes but " +
                           std::to_string(positions.size()) + " positions");
  std::vector<char> faulty(cluster_nodes, 0);
  std::vector<int> down_count(cluster_nodes, 0);  // faults on a node; down while any
  for (size_t i = 0; i < positions.size(); ++i)
    for (int node : positions[i])
      if (node < 0 || node >= cluster_nodes)
        return InvalidArgument("trace node " + trace.node_ids[i] + " maps to node " + std::to_string(node) +
                               ", outside the cluster of " + std::to_string(cluster_nodes));
  std::optional<RingOrchestrator> rings;  // made at the first sample, from the faults then
  // TPUv4: cubes with a faulty host; a cube going from none to one is lost and swapped out.
  const int cube_nodes = arch.kind == ArchKind::kTpuV4 ? arch.domain_gpus / arch.gpus_per_node : 0;
  std::vector<int> cube_down(cube_nodes > 0 ? cluster_nodes / cube_nodes + 1 : 0, 0);
  int64_t cube_losses = 0;
  Samples s;
  s.dp = DpSize(arch, options);
  size_t next = 0;
  int down = 0;
  RecutCounter recuts;
  bool changed = true;  // a node went down or up since the last sample
  for (double day = 0; day <= trace.days; day += sample_days) {
    for (; next < trace.events.size() && trace.events[next].day <= day; ++next) {
      const FaultEvent& e = trace.events[next];
      for (int node : positions[e.node]) {
        const bool was_down = down_count[node] > 0;
        down_count[node] += e.start ? 1 : -1;
        if (down_count[node] < 0)
          return InvalidArgument("trace node " + trace.node_ids[e.node] +
                                 " ends a fault it did not start (day " + std::to_string(e.day) + ")");
        const bool is_down = down_count[node] > 0;
        if (was_down == is_down) continue;
        changed = true;
        faulty[node] = is_down;
        down += is_down ? 1 : -1;
        if (rings) rings->SetFaulty(node, is_down);
        if (cube_nodes > 0) {
          int& c = cube_down[node / cube_nodes];
          // Faults already there at the first sample are part of the first placement, as for rings.
          if (is_down && c++ == 0 && !s.waste.empty()) ++cube_losses;
          if (!is_down) --c;
        }
      }
    }
    const double fault_ratio = static_cast<double>(down) / cluster_nodes;
    if (!changed) {
      s.Repeat(fault_ratio);
      if (series) series->push_back({day, s.waste.back()});
      continue;
    }
    changed = false;
    if (!rings && Orchestrated(arch, options.tp)) {
      WP_ASSIGN_OR_RETURN(RingOrchestrator o,
                          RingOrchestrator::Create(arch, faulty, options.tp, options.max_stretch));
      rings.emplace(std::move(o));
    }
    WP_ASSIGN_OR_RETURN(TpPlacement recut, PlaceTp(arch, faulty, options.tp, /*keep_groups=*/true));
    if (rings) {
      WP_RETURN_IF_ERROR(s.Add(arch, rings->rings(), rings->waste_ratio(), fault_ratio, options));
      s.waste_recut.push_back(recut.waste_ratio());
      recuts.Add(recut.tp_groups);
    } else {
      WP_RETURN_IF_ERROR(s.Add(arch, recut.tp_groups, recut.waste_ratio(), fault_ratio, options));
    }
    if (series) series->push_back({day, s.waste.back()});
  }
  ClusterMetrics m = s.Finish();
  m.reconfigurations = rings ? rings->rings_built() : cube_losses;
  m.reconfiguration_s = m.reconfigurations * ReconfigurationSeconds(arch);
  m.recut_reconfigurations = recuts.rebuilt;
  return m;
}

}  // namespace weightport::sim::hbd
