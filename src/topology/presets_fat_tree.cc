// fat-tree: hosts (host memory, optional GPUs) with one NIC each on ToRs, ToRs on spines. With a
// single ToR and no spines it is one switch, like a testbed's bridge.
#include "topology/presets_internal.h"

namespace weightport::topology::internal {

PresetInfo FatTreeInfo() {
  PresetInfo info;
  info.name = "fat-tree";
  info.summary = "hosts with one NIC each on ToRs, ToRs on spines (one ToR and spines 0: a single switch)";
  Param(info, "hosts", 8, "hosts");
  Param(info, "hosts_per_tor", 8, "hosts per ToR");
  Param(info, "gpus_per_host", 0, "GPUs per host (0: host memory is where ranks live)");
  Param(info, "pcie_gbps", 512, "host memory / GPU <-> NIC and GPU <-> host memory, Gbit/s each way");
  Param(info, "pcie_latency_us", kPcieLatencyUs, "PCIe hop latency, microseconds");
  DcnParams(info, 100);
  info.defaults["spines"] = 2;
  return info;
}

Result<Graph> BuildFatTree(PresetParams& p) {
  WP_ASSIGN_OR_RETURN(const int hosts, p.Int("hosts", 1, kMaxUnits * 8));
  WP_ASSIGN_OR_RETURN(const int per_tor, p.Int("hosts_per_tor", 1, kMaxUnits * 8));
  WP_ASSIGN_OR_RETURN(const int gpus, p.Int("gpus_per_host", 0, 64));
  WP_ASSIGN_OR_RETURN(const double pcie_gbps, p.Number("pcie_gbps"));
  WP_ASSIGN_OR_RETURN(const double pcie_lat, p.Number("pcie_latency_us", /*allow_zero=*/true));
  WP_ASSIGN_OR_RETURN(const DcnSpec dcn, ReadDcnSpec(p, /*rail_optimised=*/false));
  GraphSize size{int64_t{hosts} * (gpus + 2), int64_t{hosts} * (1 + 2 * gpus) * 2};
  AddDcnSize(size, hosts, CeilDiv(hosts, per_tor), dcn.spines);
  WP_RETURN_IF_ERROR(CheckGraphSize(p, "hosts", size));

  Graph g(p.preset());
  std::vector<DcnPort> ports;
  ports.reserve(hosts);
  int rack = -1;
  for (int h = 0; h < hosts; ++h) {
    if (h % per_tor == 0)
      rack = g.AddDomain({.name = "rack" + std::to_string(h / per_tor), .kind = DomainKind::kRack});
    const std::string name = "host" + std::to_string(h);
    const int host = g.AddDomain({.name = name, .kind = DomainKind::kHost});
    const int first_gpu = static_cast<int>(g.nodes().size());
    for (int i = 0; i < gpus; ++i)
      g.AddNode(
          {.name = name + "/gpu" + std::to_string(i), .kind = NodeKind::kGpu, .host = host, .rack = rack});
    const int mem =
        g.AddNode({.name = name + "/mem", .kind = NodeKind::kHostMemory, .host = host, .rack = rack});
    const int nic = g.AddNode({.name = name + "/nic", .kind = NodeKind::kNic, .host = host, .rack = rack});
    ports.push_back({.nic = nic, .group = h / per_tor});
    g.AddCable(mem, nic, pcie_gbps, pcie_lat);
    for (int i = 0; i < gpus; ++i) {
      g.AddCable(first_gpu + i, nic, pcie_gbps, pcie_lat);
      g.AddCable(first_gpu + i, mem, pcie_gbps, pcie_lat);
    }
  }
  WP_RETURN_IF_ERROR(AddPresetDcn(g, ports, dcn, p));
  return g;
}

}  // namespace weightport::topology::internal
