// The cost model shared by the planner, the CLI and (later) the simulator's sanity checks: bytes per
// NIC direction and per host-local copy engine, turned into seconds.
#include <algorithm>

#include "weightport/plan/planner.h"

namespace weightport {

PlanEstimate EstimatePlan(const Plan& plan) {
  const Topology& topo = plan.topology;
  const size_t n = topo.hosts().size();
  PlanEstimate e;
  e.hosts.resize(n);
  // Chunks each destination rank receives: each rank's own process and cores handle its completions.
  std::vector<uint64_t> chunks_in(plan.destinations.size(), 0);
  double fill_s = 0;
  for (size_t h = 0; h < n; ++h) e.hosts[h].host = static_cast<int>(h);
  for (const PlanStep& step : plan.steps) {
    const RankBuffer* from = plan.Buffer(step.from);
    const RankBuffer* to = plan.Buffer({PlanSide::kDestination, step.to_rank});
    if (!from || !to || from->host < 0 || to->host < 0 || static_cast<size_t>(from->host) >= n ||
        static_cast<size_t>(to->host) >= n)
      continue;  // not a valid plan; Validate() says why
    if (from->host == to->host) {
      e.hosts[from->host].local += step.bytes;
    } else {
      e.hosts[from->host].nic_out += step.bytes;
      e.hosts[to->host].nic_in += step.bytes;
    }
    chunks_in[to - plan.destinations.data()] += step.chunks;
    e.max_depth = std::max(e.max_depth, step.depth);
    if (step.depth > 0) {
      // A relay's first chunk leaves only once it has crossed every hop before it.
      const double hop_s =
          static_cast<double>(std::min(plan.options.chunk_bytes, step.bytes)) /
          (from->host == to->host ? topo.intra_host_bytes_per_s() : topo.nic_bytes_per_s(to->host));
      fill_s = std::max(fill_s, step.depth * (hop_s + plan.options.per_chunk_overhead_s));
    }
  }
  double overhead_s = 0;
  for (size_t h = 0; h < n; ++h) {
    HostLoad& load = e.hosts[h];
    const double nic = topo.nic_bytes_per_s(static_cast<int>(h));
    load.busy_s =
        std::max({load.nic_out / nic, load.nic_in / nic, load.local / topo.intra_host_bytes_per_s()});
    e.lower_bound_s = std::max(e.lower_bound_s, load.busy_s);
  }
  for (uint64_t chunks : chunks_in)
    overhead_s = std::max(overhead_s, chunks * plan.options.per_chunk_overhead_s);
  e.predicted_s = e.lower_bound_s + fill_s + overhead_s;
  return e;
}

}  // namespace weightport
