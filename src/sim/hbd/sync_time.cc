#include "weightport/sim/hbd/sync_time.h"

#include <algorithm>

#include "weightport/sim/scenarios.h"
#include "weightport/sim/simulator.h"

namespace weightport::sim::hbd {
namespace {

Result<SimResult> Run(std::string_view scenario, const nlohmann::json& params) {
  WP_ASSIGN_OR_RETURN(Scenario s, BuildScenario(scenario, params));
  return Simulate(s.plan, s.graph, s.endpoints);
}

}  // namespace

Result<std::string> ArchPreset(const ArchSpec& arch) {
  switch (arch.kind) {
    case ArchKind::kInfiniteHbd:
      return std::string("infinitehbd");
    case ArchKind::kTpuV4:
      return std::string("tpuv4");
    case ArchKind::kDgx:
      return std::string("dgx-h100");
    case ArchKind::kNvl:
      if (arch.domain_gpus == 72) return std::string("gb200-nvl72");
      break;
  }
  return NotFound("no topology preset models " + arch.name);
}

Result<SyncTimes> SimulateSyncAndRecovery(const ArchSpec& arch, int gpus, int tp, int layers) {
  SyncTimes t;
  WP_ASSIGN_OR_RETURN(t.preset, ArchPreset(arch));
  t.tp = arch.kind == ArchKind::kDgx ? std::min(tp, arch.gpus_per_node) : tp;
  t.gpus = gpus / t.tp * t.tp;
  if (t.gpus < 2 * t.tp)
    return InvalidArgument(arch.name + ": " + std::to_string(gpus) + " GPUs hold fewer than two TP-" +
                           std::to_string(t.tp) + " replicas");
  const nlohmann::json common = {{"topology", t.preset}, {"gpus", t.gpus}, {"tp", t.tp}, {"layers", layers}};
  WP_ASSIGN_OR_RETURN(SimResult s, Run("dense-50b-sync", common));
  t.sync_s = s.makespan_s;
  t.sync_bound_s = s.lower_bound_s;
  // Host 1 fails (host 0's first GPUs are the sync's source): the replicas it held part of are
  // no source, every other replica is.
  nlohmann::json replace = common;
  replace["failed_host"] = 1;
  WP_ASSIGN_OR_RETURN(SimResult r, Run("node-replacement", replace));
  t.recovery_s = r.makespan_s;
  replace["optimizer"] = 1;
  WP_ASSIGN_OR_RETURN(SimResult ro, Run("node-replacement", replace));
  t.recovery_optimizer_s = ro.makespan_s;
  return t;
}

}  // namespace weightport::sim::hbd
