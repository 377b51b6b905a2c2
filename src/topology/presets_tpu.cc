// tpuv4: cubes of 4x4x4 chips; torus wraparound and cube-to-cube links go through optical circuit
// switches, modelled as one OCS node per dimension shared by all cubes.
#include "topology/presets_internal.h"

namespace weightport::topology::internal {
namespace {

constexpr int kSide = 4;  // a cube is kSide^3 chips
constexpr int kChipsPerCube = kSide * kSide * kSide;
constexpr int kHostsPerCube = kChipsPerCube / 4;  // 4 chips per host, as 2x2x1 blocks

int ChipIndex(int x, int y, int z) { return x + kSide * y + kSide * kSide * z; }
int HostOfChip(int x, int y, int z) { return x / 2 + 2 * (y / 2) + 4 * z; }

}  // namespace

PresetInfo Tpuv4Info() {
  PresetInfo info;
  info.name = "tpuv4";
  info.summary =
      "TPU v4 cubes of 4x4x4 chips (6 ICI links per chip), cube faces on optical circuit switches, "
      "hosts of 4 chips on a two-tier DCN";
  Param(info, "cubes", 2, "4x4x4 cubes (64 chips each)");
  Param(info, "ici_gbps", 400, "per ICI link, Gbit/s each way (assumed ~50 GB/s; 6 links per chip)");
  Param(info, "pcie_gbps", 256, "chip <-> host memory and chip <-> NIC, Gbit/s each way (assumed)");
  Param(info, "hosts_per_tor", 16, "hosts per ToR (16 hosts = one cube)");
  Param(info, "hbd_latency_us", kHbdLatencyUs, "ICI link latency, microseconds (through an OCS too)");
  Param(info, "pcie_latency_us", kPcieLatencyUs, "PCIe hop latency, microseconds");
  Param(info, "ocs_switching_ms", 10, "OCS reconfiguration time, ms (MEMS: 1-10 ms; recorded only)");
  HbmParams(info, 32, 1.2, "chip");
  DcnParams(info, 200);
  return info;
}

Result<Graph> BuildTpuv4(PresetParams& p) {
  WP_ASSIGN_OR_RETURN(const int cubes, p.Int("cubes", 1, kMaxUnits / 16));
  WP_ASSIGN_OR_RETURN(const double ici_gbps, p.Number("ici_gbps"));
  WP_ASSIGN_OR_RETURN(const double pcie_gbps, p.Number("pcie_gbps"));
  WP_ASSIGN_OR_RETURN(const int per_tor, p.Int("hosts_per_tor", 1, kMaxUnits));
  WP_ASSIGN_OR_RETURN(const FabricSpec f,
                      ReadFabricSpec(p, {"ocs_switching_ms", "gpu_memory_gb", "hbm_tb_per_s"},
                                     /*rail_optimised=*/false));
  // Per cube: 64 chips, 16 hosts of memory and NIC; 144 chip-chip, 96 chip-OCS, 128 PCIe cables.
  GraphSize size{3 + int64_t{cubes} * (kChipsPerCube + 2 * kHostsPerCube),
                 int64_t{cubes} * 2 * (144 + 96 + 128)};
  AddDcnSize(size, int64_t{cubes} * kHostsPerCube, CeilDiv(int64_t{cubes} * kHostsPerCube, per_tor),
             f.dcn.spines);
  WP_RETURN_IF_ERROR(CheckGraphSize(p, "cubes", size));

  Graph g(p.preset());
  int ocs[3];
  for (int d = 0; d < 3; ++d)
    ocs[d] = g.AddNode({.name = std::string("ocs-") + "xyz"[d], .kind = NodeKind::kOcs});
  std::vector<DcnPort> ports;
  ports.reserve(static_cast<size_t>(cubes) * kHostsPerCube);
  for (int c = 0; c < cubes; ++c) {
    const std::string name = "cube" + std::to_string(c);
    const int rack = g.AddDomain({.name = name, .kind = DomainKind::kRack});
    const int hbd = g.AddDomain({.name = name, .kind = DomainKind::kHbd});
    const int first_host = AddHostDomains(g, name + "/host", kHostsPerCube);
    const int first_chip = static_cast<int>(g.nodes().size());
    for (int z = 0; z < kSide; ++z)
      for (int y = 0; y < kSide; ++y)
        for (int x = 0; x < kSide; ++x)
          g.AddNode({.name = name + "/chip" + std::to_string(ChipIndex(x, y, z)),
                     .kind = NodeKind::kGpu,
                     .hbd = hbd,
                     .host = first_host + HostOfChip(x, y, z),
                     .rack = rack});
    const int first_mem = static_cast<int>(g.nodes().size());  // then mem, nic per host
    for (int h = 0; h < kHostsPerCube; ++h) {
      const std::string host = name + "/host" + std::to_string(h);
      g.AddNode({.name = host + "/mem", .kind = NodeKind::kHostMemory, .host = first_host + h, .rack = rack});
      const int nic =
          g.AddNode({.name = host + "/nic", .kind = NodeKind::kNic, .host = first_host + h, .rack = rack});
      ports.push_back({.nic = nic, .group = (c * kHostsPerCube + h) / per_tor});
    }
    for (int z = 0; z < kSide; ++z)
      for (int y = 0; y < kSide; ++y)
        for (int x = 0; x < kSide; ++x) {
          const int chip = first_chip + ChipIndex(x, y, z);
          const int coord[3] = {x, y, z};
          const int step[3] = {1, kSide, kSide * kSide};
          for (int d = 0; d < 3; ++d) {
            if (coord[d] + 1 < kSide) g.AddCable(chip, chip + step[d], ici_gbps, f.hbd_latency_us);
            if (coord[d] == 0 || coord[d] == kSide - 1) g.AddCable(chip, ocs[d], ici_gbps, f.hbd_latency_us);
          }
          const int h = HostOfChip(x, y, z);
          g.AddCable(chip, first_mem + 2 * h, pcie_gbps, f.pcie_latency_us);
          g.AddCable(chip, first_mem + 2 * h + 1, pcie_gbps, f.pcie_latency_us);
        }
  }
  WP_RETURN_IF_ERROR(AddPresetDcn(g, ports, f.dcn, p));
  return g;
}

}  // namespace weightport::topology::internal
