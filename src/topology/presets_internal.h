// What the preset files share. Internal to the topology layer.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "topology/dcn.h"
#include "weightport/topology/preset_params.h"
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

// Bounds on a preset's graph, checked on an estimate before anything is built: a node costs about
// 400 bytes with its name, index entry and link list, a link about 40, so a graph at the limits
// takes about 2.3 GB. dgx-h100 at its 131072 nodes of 8 GPUs (2.4M nodes, 10.5M links, 1.0 GB) fits.
inline constexpr int64_t kMaxGraphNodes = int64_t{1} << 22;
inline constexpr int64_t kMaxGraphLinks = int64_t{1} << 24;

// A preset's size, counted in int64 from its parameters (an upper bound: automatic spines count
// as the most there can be).
struct GraphSize {
  int64_t nodes = 0;
  int64_t links = 0;
};
// Adds a DCN of `leaves` leaves above `nics` NICs: the leaves and spines, a cable per NIC and per
// (leaf, spine). `spines` -1 (auto) counts as 32 when there is more than one leaf.
void AddDcnSize(GraphSize& size, int64_t nics, int64_t leaves, int spines);
// An error naming `param` and its value, the estimate and the limits when `size` is over them.
Status CheckGraphSize(const PresetParams& params, const char* param, const GraphSize& size);
// ceil(a / b) for positive b.
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Declares a parameter with its default and one-line help.
void Param(PresetInfo& info, const char* key, nlohmann::json value, const char* help);
// Declares the DCN parameters: nic_gbps, spines, oversubscription, nic_latency_us, switch_latency_us.
void DcnParams(PresetInfo& info, int nic_gbps);
Result<DcnSpec> ReadDcnSpec(const PresetParams& params, bool rail_optimised);
// Adds the DCN and records the spines it built in the parameters.
Status AddPresetDcn(Graph& graph, const std::vector<DcnPort>& ports, DcnSpec spec, PresetParams& params);
// Declares gpu_memory_gb and hbm_tb_per_s (recorded only); `per` names the accelerator ("GPU", "chip").
void HbmParams(PresetInfo& info, nlohmann::json memory_gb, nlohmann::json tb_per_s, const char* per);

// What the accelerator presets read after their own figures, in this order: hbd_latency_us,
// pcie_latency_us, the recorded-only numbers `recorded` (checked, not used), the DCN parameters.
struct FabricSpec {
  double hbd_latency_us = 0;
  double pcie_latency_us = 0;
  DcnSpec dcn;
};
Result<FabricSpec> ReadFabricSpec(const PresetParams& params, std::initializer_list<const char*> recorded,
                                  bool rail_optimised);

// Host domains "<prefix>0" .. "<prefix><count - 1>"; returns the first one's index.
int AddHostDomains(Graph& graph, const std::string& prefix, int count);

// A host whose GPUs each have their own NIC and are cabled to one switch and to the host memory.
struct RailHost {
  std::string name;  // node names: <name>/gpu<i>, <name>/<switch_name>, <name>/mem, <name>/nic<i>
  int gpus = 0;
  int host = -1, hbd = -1, rack = -1;  // domains; the GPUs are in the HBD
  int group = 0;                       // the NICs' DCN group; their rail is the GPU index
  NodeKind switch_kind = NodeKind::kNvSwitch;
  const char* switch_name = "nvswitch";
  bool switch_in_hbd = true;
  double switch_gbps = 0, switch_latency_us = 0;  // GPU <-> switch
  double pcie_gbps = 0, pcie_latency_us = 0;      // GPU <-> memory and GPU <-> NIC
};
// Adds the GPUs, the switch, the memory and the NICs in that order, then per GPU its cables to the
// switch, the memory and its NIC; appends the NICs to `ports`. Returns the first GPU's index.
int AddRailHost(Graph& graph, const RailHost& host, std::vector<DcnPort>& ports);

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
