// A cluster's metrics under node faults, per architecture: GPU waste of a TP job, the share of its
// DP traffic that crosses a ToR, and (over a trace) how often and how long the HBD reconfigures.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/architecture.h"
#include "weightport/sim/hbd/dp_placement.h"
#include "weightport/sim/hbd/fault_trace.h"

namespace weightport::sim::hbd {

struct Percentiles {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
};
Percentiles Summarise(std::vector<double> values);

struct EvalOptions {
  int tp = 16;
  int dp = 0;  // 0: AutoDp(arch, tor_gpus, tp)
  int tor_gpus = 256;
  DpPolicy dp_policy = DpPolicy::kTorAware;
  int max_stretch = 64;  // infinitehbd over a trace: RingOrchestrator's limit
};

struct ClusterMetrics {
  int samples = 0;
  int dp = 0;
  double mean_fault_ratio = 0;
  Percentiles waste;  // GPU waste ratio
  // Share of DP bytes crossing a ToR, over samples with a DP group; none when no sample had one.
  std::optional<Percentiles> cross_tor;
  // Over a trace only. Reconfigurations: infinitehbd, rings built after the first placement by
  // RingOrchestrator; tpuv4, cubes lost to a fault (the slice is re-formed around a spare cube by
  // the MEMS OCS); none for NVLink domains and DGX, which have no circuits to switch.
  int64_t reconfigurations = 0;
  double reconfiguration_s = 0;  // reconfigurations x ReconfigurationSeconds
  // Over a trace, where RingOrchestrator places the rings (infinitehbd, TP spanning nodes): the
  // waste of a greedy re-cut of the whole ring at every sample (the least waste; the orchestrator
  // trades some of it for far fewer reconfigurations), and the rings each re-cut has that the
  // previous one did not.
  std::optional<Percentiles> waste_recut;
  int64_t recut_reconfigurations = 0;
};

// Switching time of one reconfiguration: OCSTrx 80 us (InfiniteHBD, 60-80 us), MEMS OCS 10 ms
// (TPUv4 Palomar, 1-10 ms), 0 for architectures without circuits.
double ReconfigurationSeconds(const ArchSpec& arch);

// Means over `samples` draws of round(ratio x nodes) faulty nodes, chosen uniformly.
Result<ClusterMetrics> EvaluateAtFaultRatio(const ArchSpec& arch, int cluster_nodes, double ratio,
                                            int samples, uint64_t seed, const EvalOptions& options);

// The most node placements one architecture's evaluation may take (samples x cluster nodes, summed
// over the fault ratios and the trace): ~30 ns each here, so about 16 s.
inline constexpr int64_t kMaxEvalNodeSamples = int64_t{1} << 29;

// The most samples EvaluateTrace takes (each places every TP group of the cluster once).
inline constexpr int64_t kMaxTraceSamples = int64_t{1} << 17;
// Samples of a trace every `sample_days`: floor(days / sample_days) + 1. Errors when sample_days is
// not > 0 or the count is over kMaxTraceSamples (naming both figures and the limit).
Result<int64_t> TraceSamples(const FaultTrace& trace, double sample_days);

// The trace replayed event by event, each trace node's faults taking down the cluster nodes
// `positions` gives it (TraceMapping::nodes); a cluster node is down while any fault on it is.
// Waste and cross-ToR traffic sampled every `sample_days` (a sample with no event since the one
// before repeats its figures). `series` receives (day, waste ratio).
Result<ClusterMetrics> EvaluateTrace(const ArchSpec& arch, int cluster_nodes, const FaultTrace& trace,
                                     const std::vector<std::vector<int>>& positions, double sample_days,
                                     const EvalOptions& options,
                                     std::vector<std::pair<double, double>>* series = nullptr);

}  // namespace weightport::sim::hbd
