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

void AddDcnSize(GraphSize& size, int64_t nics, int64_t leaves, int spines) {
  const int64_t s = spines >= 0 ? spines : (leaves > 1 ? 32 : 0);
  size.nodes += leaves + s;
  size.links += 2 * (nics + leaves * s);
}

Status CheckGraphSize(const PresetParams& params, const char* param, const GraphSize& size) {
  if (size.nodes <= kMaxGraphNodes && size.links <= kMaxGraphLinks) return Status::Ok();
  return params.Error(param, "= " + params.merged().at(param).dump() + " would build about " +
                                 std::to_string(size.nodes) + " nodes and " + std::to_string(size.links) +
                                 " links; the limit is " + std::to_string(kMaxGraphNodes) + " nodes and " +
                                 std::to_string(kMaxGraphLinks) + " links");
}

Status AddPresetDcn(Graph& graph, const std::vector<DcnPort>& ports, DcnSpec spec, PresetParams& params) {
  WP_ASSIGN_OR_RETURN(DcnResult dcn, AddDcn(graph, ports, spec, params.preset()));
  params.Set("spines", dcn.spines);
  return Status::Ok();
}

void HbmParams(PresetInfo& info, nlohmann::json memory_gb, nlohmann::json tb_per_s, const char* per) {
  Param(info, "gpu_memory_gb", std::move(memory_gb),
        (std::string("HBM per ") + per + ", GB (recorded only)").c_str());
  Param(info, "hbm_tb_per_s", std::move(tb_per_s),
        (std::string("HBM bandwidth per ") + per + ", TB/s (recorded only)").c_str());
}

Result<FabricSpec> ReadFabricSpec(const PresetParams& params, std::initializer_list<const char*> recorded,
                                  bool rail_optimised) {
  FabricSpec spec;
  WP_ASSIGN_OR_RETURN(spec.hbd_latency_us, params.Number("hbd_latency_us", /*allow_zero=*/true));
  WP_ASSIGN_OR_RETURN(spec.pcie_latency_us, params.Number("pcie_latency_us", /*allow_zero=*/true));
  for (const char* key : recorded) WP_RETURN_IF_ERROR(params.Number(key).status());
  WP_ASSIGN_OR_RETURN(spec.dcn, ReadDcnSpec(params, rail_optimised));
  return spec;
}

int AddHostDomains(Graph& graph, const std::string& prefix, int count) {
  const int first = static_cast<int>(graph.domains().size());
  for (int i = 0; i < count; ++i)
    graph.AddDomain({.name = prefix + std::to_string(i), .kind = DomainKind::kHost});
  return first;
}

int AddRailHost(Graph& graph, const RailHost& h, std::vector<DcnPort>& ports) {
  const int first_gpu = static_cast<int>(graph.nodes().size());
  for (int i = 0; i < h.gpus; ++i)
    graph.AddNode({.name = h.name + "/gpu" + std::to_string(i),
                   .kind = NodeKind::kGpu,
                   .hbd = h.hbd,
                   .host = h.host,
                   .rack = h.rack,
                   .rail = i});
  const int sw = graph.AddNode({.name = h.name + "/" + h.switch_name,
                                .kind = h.switch_kind,
                                .hbd = h.switch_in_hbd ? h.hbd : -1,
                                .host = h.host,
                                .rack = h.rack});
  const int mem =
      graph.AddNode({.name = h.name + "/mem", .kind = NodeKind::kHostMemory, .host = h.host, .rack = h.rack});
  for (int i = 0; i < h.gpus; ++i) {
    const int nic = graph.AddNode({.name = h.name + "/nic" + std::to_string(i),
                                   .kind = NodeKind::kNic,
                                   .host = h.host,
                                   .rack = h.rack,
                                   .rail = i});
    ports.push_back({.nic = nic, .group = h.group, .rail = i});
    graph.AddCable(first_gpu + i, sw, h.switch_gbps, h.switch_latency_us);
    graph.AddCable(first_gpu + i, mem, h.pcie_gbps, h.pcie_latency_us);
    graph.AddCable(first_gpu + i, nic, h.pcie_gbps, h.pcie_latency_us);
  }
  return first_gpu;
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
