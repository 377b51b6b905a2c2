// infinitehbd: nodes of g GPUs whose optical-circuit-switching transceivers join GPU j of each node
// to GPU j of the next node of its ring. Only the active +-1 circuits are links; the standby
// circuits to nodes 2..k hops away are recorded (k) for a later fault-orchestration step.
#include "topology/presets_internal.h"

namespace weightport::topology::internal {

PresetInfo InfiniteHbdInfo() {
  PresetInfo info;
  info.name = "infinitehbd";
  info.summary =
      "InfiniteHBD: nodes of g GPUs, GPU j of each node on a ring of nodes through OCS transceivers "
      "(k-hop reach), one 400G NIC per GPU on a rail-optimised two-tier DCN";
  Param(info, "nodes", 8, "nodes");
  Param(info, "gpus_per_node", 4, "GPUs per node (g)");
  Param(info, "k", 2, "hops an OCS transceiver reaches (standby circuits; recorded only)");
  Param(info, "ring_nodes", "auto", "nodes per ring (one HBD); must divide nodes; \"auto\": all nodes");
  Param(info, "hbd_gbps", 3600,
        "GPU HBD bandwidth, Gbit/s each way, split over the two ring directions (assumed equal to NVLink4)");
  Param(info, "pcie_gbps", 512, "GPU <-> PCIe switch, NIC and host memory, Gbit/s each way (PCIe Gen5 x16)");
  Param(info, "nodes_per_su", 32, "nodes per scalable unit (one rail leaf per rail per unit)");
  Param(info, "hbd_latency_us", kHbdLatencyUs, "ring link latency, microseconds");
  Param(info, "pcie_latency_us", kPcieLatencyUs, "PCIe hop latency, microseconds");
  Param(info, "ocs_switching_us", 70, "OCSTrx circuit switching time, microseconds (60-80; recorded only)");
  DcnParams(info, 400);
  return info;
}

Result<Graph> BuildInfiniteHbd(PresetParams& p) {
  WP_ASSIGN_OR_RETURN(const int nodes, p.Int("nodes", 2, kMaxUnits));
  WP_ASSIGN_OR_RETURN(const int gpus, p.Int("gpus_per_node", 1, 64));
  WP_ASSIGN_OR_RETURN(int ring, p.IntOrAuto("ring_nodes", 2, nodes));
  if (ring < 0) {
    ring = nodes;
    p.Set("ring_nodes", ring);
  }
  if (nodes % ring != 0) return p.Error("ring_nodes", "must divide nodes (" + std::to_string(nodes) + ")");
  WP_ASSIGN_OR_RETURN(const int k, p.Int("k", 1, ring - 1));
  (void)k;
  WP_ASSIGN_OR_RETURN(const double hbd_gbps, p.Number("hbd_gbps"));
  WP_ASSIGN_OR_RETURN(const double pcie_gbps, p.Number("pcie_gbps"));
  WP_ASSIGN_OR_RETURN(const int per_su, p.Int("nodes_per_su", 1, kMaxUnits));
  WP_ASSIGN_OR_RETURN(const FabricSpec f, ReadFabricSpec(p, {"ocs_switching_us"}, /*rail_optimised=*/true));
  GraphSize size{int64_t{nodes} * (2 * gpus + 2), int64_t{nodes} * gpus * 8};
  AddDcnSize(size, int64_t{nodes} * gpus, CeilDiv(nodes, per_su) * gpus, f.dcn.spines);
  WP_RETURN_IF_ERROR(CheckGraphSize(p, "nodes", size));

  Graph g(p.preset());
  std::vector<int> first_gpu(nodes);
  std::vector<DcnPort> ports;
  ports.reserve(static_cast<size_t>(nodes) * gpus);
  int ring_domain = -1, su_domain = -1;
  for (int n = 0; n < nodes; ++n) {
    if (n % ring == 0)
      ring_domain = g.AddDomain({.name = "ring" + std::to_string(n / ring), .kind = DomainKind::kHbd});
    if (n % per_su == 0)
      su_domain = g.AddDomain({.name = "su" + std::to_string(n / per_su), .kind = DomainKind::kRack});
    const std::string name = "node" + std::to_string(n);
    const int host = g.AddDomain({.name = name, .kind = DomainKind::kHost});
    first_gpu[n] = AddRailHost(g,
                               {.name = name,
                                .gpus = gpus,
                                .host = host,
                                .hbd = ring_domain,
                                .rack = su_domain,
                                .group = n / per_su,
                                .switch_kind = NodeKind::kPcieSwitch,
                                .switch_name = "pcie",
                                .switch_in_hbd = false,
                                .switch_gbps = pcie_gbps,
                                .switch_latency_us = f.pcie_latency_us,
                                .pcie_gbps = pcie_gbps,
                                .pcie_latency_us = f.pcie_latency_us},
                               ports);
  }
  // The active ring: node n -> the next node of its ring, for every GPU index.
  for (int n = 0; n < nodes; ++n) {
    const int next = n / ring * ring + (n % ring + 1) % ring;
    for (int i = 0; i < gpus; ++i)
      g.AddCable(first_gpu[n] + i, first_gpu[next] + i, hbd_gbps / 2, f.hbd_latency_us);
  }
  WP_RETURN_IF_ERROR(AddPresetDcn(g, ports, f.dcn, p));
  return g;
}

}  // namespace weightport::topology::internal
