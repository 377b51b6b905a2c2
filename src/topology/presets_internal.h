// What the preset files share. Internal to the topology layer.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "topology/dcn.h"
#include "topology/preset_params.h"
#include "weightport/topology/presets.h"

namespace weightport::topology::internal {

// Assumed latencies (docs/TOPOLOGY.md): a link into an NVLink / ICI fabric, a PCIe hop, a NIC to
// its leaf, a leaf to a spine.
inline constexpr double kHbdLatencyUs = 0.25;
inline constexpr double kPcieLatencyUs = 0.5;
inline constexpr double kNicLatencyUs = 1.0;
inline constexpr double kSwitchLatencyUs = 1.0;
// Bounds on counts, so that sizes stay well inside int.
inline constexpr int kMaxUnits = 1 << 17;

// Declares a parameter with its default and one-line help.
void Param(PresetInfo& info, const char* key, nlohmann::json value, const char* help);
// Declares the DCN parameters: nic_gbps, spines, oversubscription, nic_latency_us, switch_latency_us.
void DcnParams(PresetInfo& info, int nic_gbps);
Result<DcnSpec> ReadDcnSpec(const PresetParams& params, bool rail_optimised);
// Adds the DCN and records the spines it built in the parameters.
Status AddPresetDcn(Graph& graph, const std::vector<DcnPort>& ports, DcnSpec spec, PresetParams& params);

PresetInfo DgxInfo(bool h200);
Result<Graph> BuildDgx(PresetParams& params);
PresetInfo Gb200Info();
Result<Graph> BuildGb200(PresetParams& params);
PresetInfo Tpuv4Info();
Result<Graph> BuildTpuv4(PresetParams& params);
PresetInfo InfiniteHbdInfo();
Result<Graph> BuildInfiniteHbd(PresetParams& params);
PresetInfo FatTreeInfo();
Result<Graph> BuildFatTree(PresetParams& params);

}  // namespace weightport::topology::internal
