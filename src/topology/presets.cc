#include "weightport/topology/presets.h"

#include "topology/presets_internal.h"

namespace weightport::topology {
namespace internal {

void Param(PresetInfo& info, const char* key, nlohmann::json value, const char* help) {
  info.defaults[key] = std::move(value);
  info.help[key] = help;
}

void DcnParams(PresetInfo& info, int nic_gbps) {
  Param(info, "nic_gbps", nic_gbps, "NIC <-> leaf bandwidth, Gbit/s each way");
  Param(info, "spines", "auto",
        "spine planes (each leaf has one uplink to each); \"auto\": enough for the oversubscription, at "
        "most 32; 0: none (single leaf only)");
  Param(info, "oversubscription", 1, "leaf downlink total / leaf uplink total");
  Param(info, "nic_latency_us", kNicLatencyUs, "NIC <-> leaf latency, microseconds");
  Param(info, "switch_latency_us", kSwitchLatencyUs, "leaf <-> spine latency, microseconds");
}

Result<DcnSpec> ReadDcnSpec(const PresetParams& params, bool rail_optimised) {
  DcnSpec spec;
  spec.rail_optimised = rail_optimised;
  WP_ASSIGN_OR_RETURN(spec.nic_gbps, params.Number("nic_gbps"));
  WP_ASSIGN_OR_RETURN(spec.spines, params.IntOrAuto("spines", 0, 4096));
  WP_ASSIGN_OR_RETURN(spec.oversubscription, params.Number("oversubscription"));
  WP_ASSIGN_OR_RETURN(spec.nic_latency_us, params.Number("nic_latency_us", /*allow_zero=*/true));
  WP_ASSIGN_OR_RETURN(spec.switch_latency_us, params.Number("switch_latency_us", /*allow_zero=*/true));
  return spec;
}

Status AddPresetDcn(Graph& graph, const std::vector<DcnPort>& ports, DcnSpec spec, PresetParams& params) {
  WP_ASSIGN_OR_RETURN(DcnResult dcn, AddDcn(graph, ports, spec, params.preset()));
  params.Set("spines", dcn.spines);
  return Status::Ok();
}

}  // namespace internal

std::vector<PresetInfo> Presets() {
  return {internal::DgxInfo(false), internal::DgxInfo(true),     internal::Gb200Info(),
          internal::Tpuv4Info(),    internal::InfiniteHbdInfo(), internal::FatTreeInfo()};
}

Result<Graph> MakePreset(std::string_view name, const nlohmann::json& params) {
  using Builder = Result<Graph> (*)(internal::PresetParams&);
  const std::pair<std::string_view, Builder> builders[] = {
      {"dgx-h100", internal::BuildDgx},
      {"dgx-h200", internal::BuildDgx},
      {"gb200-nvl72", internal::BuildGb200},
      {"tpuv4", internal::BuildTpuv4},
      {"infinitehbd", internal::BuildInfiniteHbd},
      {"fat-tree", internal::BuildFatTree},
  };
  for (const PresetInfo& info : Presets()) {
    if (info.name != name) continue;
    WP_ASSIGN_OR_RETURN(internal::PresetParams merged,
                        internal::PresetParams::Merge(name, info.defaults, params));
    for (const auto& [n, build] : builders) {
      if (n != name) continue;
      WP_ASSIGN_OR_RETURN(Graph graph, build(merged));
      graph.set_params(merged.merged());
      WP_RETURN_IF_ERROR(graph.Validate());
      return graph;
    }
  }
  std::string known;
  for (const PresetInfo& info : Presets()) known += (known.empty() ? "" : ", ") + info.name;
  return NotFound("unknown topology preset '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace weightport::topology
