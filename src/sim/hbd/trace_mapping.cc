#include "weightport/sim/hbd/trace_mapping.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

namespace weightport::sim::hbd {

Result<TraceMapping> MapTrace(const FaultTrace& trace, int trace_nodes, int gpus_per_trace_node,
                              int cluster_nodes, int gpus_per_node, uint64_t seed) {
  const int listed = static_cast<int>(trace.node_ids.size());
  if (trace_nodes < listed)
    return InvalidArgument("the trace lists " + std::to_string(listed) +
                           " servers with faults, more than the " + std::to_string(trace_nodes) +
                           " trace nodes it is said to cover");
  if (trace_nodes < 1 || gpus_per_trace_node < 1 || gpus_per_node < 1 || cluster_nodes < 1)
    return InvalidArgument("trace nodes, GPUs per trace node, cluster nodes and GPUs per node must be >= 1");
  const int g = gpus_per_node, big = gpus_per_trace_node;
  if (big % g != 0 && g % big != 0)
    return InvalidArgument("trace servers of " + std::to_string(big) + " GPUs do not tile nodes of " +
                           std::to_string(g) + " GPUs: one count must divide the other");
  // A slot is `span` consecutive nodes (servers bigger than nodes) or 1/`share` of one node.
  const int span = big >= g ? big / g : 1, share = big >= g ? 1 : g / big;
  TraceMapping m;
  m.slots = static_cast<int>(static_cast<int64_t>(cluster_nodes) / span * share);
  m.idle_nodes = cluster_nodes % span;
  if (m.slots == 0)
    return InvalidArgument("a cluster of " + std::to_string(cluster_nodes) + " nodes of " +
                           std::to_string(g) + " GPUs holds no trace server of " + std::to_string(big) +
                           " GPUs");
  m.copies = static_cast<double>(m.slots) / trace_nodes;
  m.nodes.assign(listed, {});
  std::vector<int> order(trace_nodes);
  std::mt19937_64 rng(seed);
  for (int base = 0; base < m.slots; base += trace_nodes) {
    std::iota(order.begin(), order.end(), 0);
    if (seed != 0) std::shuffle(order.begin(), order.end(), rng);
    for (int j = 0; j < trace_nodes && base + j < m.slots; ++j) {
      const int server = order[j], slot = base + j;
      if (server >= listed) continue;  // a server that never failed
      for (int n = 0; n < span; ++n) m.nodes[server].push_back(slot / share * span + n);
    }
  }
  return m;
}

}  // namespace weightport::sim::hbd
