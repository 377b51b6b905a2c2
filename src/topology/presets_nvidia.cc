// dgx-h100, dgx-h200 and gb200-nvl72.
#include "topology/presets_internal.h"

namespace weightport::topology::internal {

PresetInfo DgxInfo(bool h200) {
  PresetInfo info;
  info.name = h200 ? "dgx-h200" : "dgx-h100";
  info.summary = std::string("DGX ") + (h200 ? "H200" : "H100") +
                 " nodes: 8 GPUs on NVLink4 (450 GB/s each way per GPU), one 400G NIC per GPU, a "
                 "rail-optimised two-tier DCN";
  Param(info, "nodes", 2, "DGX nodes");
  Param(info, "gpus_per_node", 8, "GPUs per node, each with its own NIC");
  Param(info, "hbd_gbps", 3600, "GPU <-> NVSwitch bandwidth, Gbit/s each way (NVLink4: 450 GB/s)");
  Param(info, "pcie_gbps", 512, "GPU <-> NIC and GPU <-> host memory, Gbit/s each way (PCIe Gen5 x16)");
  Param(info, "nodes_per_su", 32, "nodes per scalable unit (one rail leaf per rail per unit)");
  Param(info, "hbd_latency_us", kHbdLatencyUs, "GPU <-> NVSwitch latency, microseconds");
  Param(info, "pcie_latency_us", kPcieLatencyUs, "PCIe hop latency, microseconds");
  HbmParams(info, h200 ? 141 : 80, h200 ? 4.8 : 3.35, "GPU");
  DcnParams(info, 400);
  return info;
}

Result<Graph> BuildDgx(PresetParams& p) {
  WP_ASSIGN_OR_RETURN(const int nodes, p.Int("nodes", 1, kMaxUnits));
  WP_ASSIGN_OR_RETURN(const int gpus, p.Int("gpus_per_node", 1, 64));
  WP_ASSIGN_OR_RETURN(const int per_su, p.Int("nodes_per_su", 1, kMaxUnits));
  WP_ASSIGN_OR_RETURN(const double hbd_gbps, p.Number("hbd_gbps"));
  WP_ASSIGN_OR_RETURN(const double pcie_gbps, p.Number("pcie_gbps"));
  WP_ASSIGN_OR_RETURN(const FabricSpec f,
                      ReadFabricSpec(p, {"gpu_memory_gb", "hbm_tb_per_s"}, /*rail_optimised=*/true));
  GraphSize size{int64_t{nodes} * (2 * gpus + 2), int64_t{nodes} * gpus * 6};
  AddDcnSize(size, int64_t{nodes} * gpus, CeilDiv(nodes, per_su) * gpus, f.dcn.spines);
  WP_RETURN_IF_ERROR(CheckGraphSize(p, "nodes", size));

  Graph g(p.preset());
  std::vector<DcnPort> ports;
  ports.reserve(static_cast<size_t>(nodes) * gpus);
  int su_domain = -1;
  for (int n = 0; n < nodes; ++n) {
    if (n % per_su == 0)
      su_domain = g.AddDomain({.name = "su" + std::to_string(n / per_su), .kind = DomainKind::kRack});
    const std::string name = "node" + std::to_string(n);
    const int host = g.AddDomain({.name = name, .kind = DomainKind::kHost});
    const int hbd = g.AddDomain({.name = name, .kind = DomainKind::kHbd});
    AddRailHost(g,
                {.name = name,
                 .gpus = gpus,
                 .host = host,
                 .hbd = hbd,
                 .rack = su_domain,
                 .group = n / per_su,
                 .switch_gbps = hbd_gbps,
                 .switch_latency_us = f.hbd_latency_us,
                 .pcie_gbps = pcie_gbps,
                 .pcie_latency_us = f.pcie_latency_us},
                ports);
  }
  WP_RETURN_IF_ERROR(AddPresetDcn(g, ports, f.dcn, p));
  return g;
}

PresetInfo Gb200Info() {
  PresetInfo info;
  info.name = "gb200-nvl72";
  info.summary =
      "GB200 NVL72 racks: 72 GPUs on NVLink5 (900 GB/s each way per GPU), trays of 2 Grace + 4 "
      "Blackwell, one 400G NIC per GPU, a rail-optimised two-tier DCN";
  Param(info, "racks", 2, "NVL racks (one NVLink domain each)");
  Param(info, "gpus_per_rack", 72, "GPUs per NVLink domain: 72 (NVL72), 36 (NVL36) ... 576");
  Param(info, "gpus_per_node", 4, "GPUs per compute tray (one host: 2 Grace CPUs + 4 GPUs)");
  Param(info, "hbd_gbps", 7200, "GPU <-> NVSwitch bandwidth, Gbit/s each way (NVLink5: 900 GB/s)");
  Param(info, "pcie_gbps", 512, "GPU <-> NIC bandwidth, Gbit/s each way (PCIe Gen5 x16)");
  Param(info, "c2c_gbps", 1800,
        "GPU <-> host memory, Gbit/s each way (NVLink-C2C 900 GB/s bidirectional per Grace, shared by its "
        "2 GPUs)");
  Param(info, "racks_per_su", 8, "racks per scalable unit (one rail leaf per rail per unit)");
  Param(info, "hbd_latency_us", kHbdLatencyUs, "GPU <-> NVSwitch latency, microseconds");
  Param(info, "pcie_latency_us", kPcieLatencyUs, "PCIe / C2C hop latency, microseconds");
  HbmParams(info, 186, 8, "GPU");
  DcnParams(info, 400);
  return info;
}

Result<Graph> BuildGb200(PresetParams& p) {
  WP_ASSIGN_OR_RETURN(const int racks, p.Int("racks", 1, kMaxUnits));
  WP_ASSIGN_OR_RETURN(const int per_tray, p.Int("gpus_per_node", 1, 64));
  WP_ASSIGN_OR_RETURN(const int per_rack, p.Int("gpus_per_rack", 1, 576));
  if (per_rack % per_tray != 0)
    return p.Error("gpus_per_rack", "must be a multiple of gpus_per_node (" + std::to_string(per_tray) + ")");
  WP_ASSIGN_OR_RETURN(const int per_su, p.Int("racks_per_su", 1, kMaxUnits));
  WP_ASSIGN_OR_RETURN(const double hbd_gbps, p.Number("hbd_gbps"));
  WP_ASSIGN_OR_RETURN(const double pcie_gbps, p.Number("pcie_gbps"));
  WP_ASSIGN_OR_RETURN(const double c2c_gbps, p.Number("c2c_gbps"));
  WP_ASSIGN_OR_RETURN(const FabricSpec f,
                      ReadFabricSpec(p, {"gpu_memory_gb", "hbm_tb_per_s"}, /*rail_optimised=*/true));
  GraphSize size{int64_t{racks} * (2 * per_rack + 1 + per_rack / per_tray), int64_t{racks} * per_rack * 6};
  AddDcnSize(size, int64_t{racks} * per_rack, CeilDiv(racks, per_su) * per_tray, f.dcn.spines);
  WP_RETURN_IF_ERROR(CheckGraphSize(p, "racks", size));

  Graph g(p.preset());
  const int trays = per_rack / per_tray;
  std::vector<DcnPort> ports;
  ports.reserve(static_cast<size_t>(racks) * per_rack);
  for (int r = 0; r < racks; ++r) {
    const std::string name = "rack" + std::to_string(r);
    const int rack = g.AddDomain({.name = name, .kind = DomainKind::kRack});
    const int hbd = g.AddDomain({.name = name, .kind = DomainKind::kHbd});
    const int first_tray = AddHostDomains(g, name + "/tray", trays);
    const int first_gpu = static_cast<int>(g.nodes().size());
    for (int i = 0; i < per_rack; ++i)
      g.AddNode({.name = name + "/gpu" + std::to_string(i),
                 .kind = NodeKind::kGpu,
                 .hbd = hbd,
                 .host = first_tray + i / per_tray,
                 .rack = rack,
                 .rail = i % per_tray});
    const int sw =
        g.AddNode({.name = name + "/nvswitch", .kind = NodeKind::kNvSwitch, .hbd = hbd, .rack = rack});
    const int first_mem = static_cast<int>(g.nodes().size());
    for (int t = 0; t < trays; ++t)
      g.AddNode({.name = name + "/tray" + std::to_string(t) + "/mem",
                 .kind = NodeKind::kHostMemory,
                 .host = first_tray + t,
                 .rack = rack});
    for (int i = 0; i < per_rack; ++i) {
      const int nic = g.AddNode({.name = name + "/nic" + std::to_string(i),
                                 .kind = NodeKind::kNic,
                                 .host = first_tray + i / per_tray,
                                 .rack = rack,
                                 .rail = i % per_tray});
      ports.push_back({.nic = nic, .group = r / per_su, .rail = i % per_tray});
      g.AddCable(first_gpu + i, sw, hbd_gbps, f.hbd_latency_us);
      g.AddCable(first_gpu + i, first_mem + i / per_tray, c2c_gbps, f.pcie_latency_us);
      g.AddCable(first_gpu + i, nic, pcie_gbps, f.pcie_latency_us);
    }
  }
  WP_RETURN_IF_ERROR(AddPresetDcn(g, ports, f.dcn, p));
  return g;
}

}  // namespace weightport::topology::internal
