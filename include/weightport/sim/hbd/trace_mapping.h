// Placing a fault trace's servers on a cluster's nodes.
//
// A trace lists the servers that failed, not the cluster: it covers `trace_nodes` servers of
// `gpus_per_trace_node` GPUs, the listed ones (trace node indices 0, 1, ...) and others that never
// failed. The cluster's nodes (`gpus_per_node` GPUs each) are cut into slots of one trace server's
// GPUs: a slot is G/g consecutive nodes when trace servers are bigger than nodes (the server's
// fault takes all of them down), or a share of one node when they are smaller (the node is down
// while any of its servers is). The slots are filled by copies of the trace, each a seeded random
// order of all its servers (seed 0: in order): a cluster bigger than the trace holds several
// copies (tiling), a smaller one part of one copy.
#pragma once

#include <cstdint>
#include <vector>

#include "weightport/core/status.h"
#include "weightport/sim/hbd/fault_trace.h"

namespace weightport::sim::hbd {

struct TraceMapping {
  // Per listed trace node, the cluster nodes its faults take down (none where no copy placed it).
  std::vector<std::vector<int>> nodes;
  int slots = 0;       // trace servers the cluster holds
  double copies = 0;   // slots / trace_nodes: how many times the trace is tiled
  int idle_nodes = 0;  // cluster nodes left over from whole slots; they never fail
};

// Errors: trace_nodes smaller than the servers the trace lists, sizes < 1, GPU counts of which
// neither divides the other, and a cluster holding no whole trace server; each names the figures.
Result<TraceMapping> MapTrace(const FaultTrace& trace, int trace_nodes, int gpus_per_trace_node,
                              int cluster_nodes, int gpus_per_node, uint64_t seed);

}  // namespace weightport::sim::hbd
