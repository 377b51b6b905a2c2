// Options of `weightport hbd` (compare, place, trace, cost-sweep, mfu, tor-curve) and the runs of those in
// files of their own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/architecture.h"
#include "weightport/sim/hbd/fault_trace.h"

namespace weightport::cli {

struct HbdOptions {
  int gpus = 4608, tp = 16, k = 3, samples = 20;
  std::string archs = "infinitehbd,nvl-72,tpuv4,dgx";
  std::string ratios = "0.01,0.02,0.05,0.07,0.1";
  std::string trace, plot, trace_plot;
  double sample_days = 1.0 / 24;
  int trace_nodes = 0, gpus_per_trace_node = 8, trace_mappings = 5;
  bool gpus_given = false;  // --gpus on the command line; else a trace's own GPUs
  int dp = 0, tor_gpus = 256, layers = 56, sim_tp = 8, max_stretch = 64;
  std::string dp_policy = "tor-aware", model = "none", cost;
  // hbd place
  int nodes = 64;
  std::string faulty;
  double fault_ratio = 0.05;
  std::string svg;
  uint64_t seed = 1;
  bool json = false;
  // hbd mfu
  std::string mfu_model = "dense70b", mfu_gpus = "1024,2048,4096,8192,16384";
  double mfu_fault_ratio = 0;
  int global_batch = 0;  // sequences; 0: the model preset's
  // hbd tor-curve: ToR groups of the same size for every architecture (576 = 8 NVL-72 racks = 16
  // NVL-36 racks = 9 TPUv4 cubes = 72 DGX nodes = 144 ring nodes)
  std::string curve_archs = "infinitehbd,nvl-72,nvl-36,tpuv4,dgx", curve_ratios = "0.02,0.05";
  std::string borrow = "0,4,8,16,32,64,128,256,512,1024,2048,4096,inf";
  int curve_tor_gpus = 576;
  // hbd trace
  sim::hbd::SyntheticOptions synthetic;
  std::string out;
};

// --fault-ratio's list: each in [0, 1), at least one; errors name the option.
Result<std::vector<double>> ParseFaultRatios(const std::string& text);
// --arch's list of architectures (K hops for the ring), at least one; errors name the option.
Result<std::vector<sim::hbd::ArchSpec>> ParseArchs(const std::string& text, int k);
// Nodes of this architecture for `gpus` GPUs: whole domains where it has them.
int ClusterNodes(const sim::hbd::ArchSpec& a, int gpus);

// `weightport hbd compare`: tables or JSON on stdout, progress on stderr; the exit code.
int RunHbdCompare(HbdOptions options);
// `weightport hbd cost-sweep`: the InfiniteHBD / NVL-72 cost ratio over its two inputs, and the HBD
// cost per Tb/s of every architecture (hbd_cost_sweep.cc).
int RunHbdCostSweep(const HbdOptions& options);
// `weightport hbd mfu`: the best-MFU layout per architecture and GPU count, against DGX (hbd_mfu.cc).
int RunHbdMfu(const HbdOptions& options);
// `weightport hbd tor-curve`: GPU waste against the share of DP traffic crossing a ToR, per
// architecture and fault ratio, over the borrow thresholds (hbd_tor_curve.cc).
int RunHbdTorCurve(const HbdOptions& options);

}  // namespace weightport::cli
