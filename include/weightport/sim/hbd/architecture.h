// High-bandwidth-domain architectures as the cluster evaluation sees them: how GPUs group into
// nodes (the unit a fault takes down) and nodes into HBDs, and what a tensor-parallel (TP) group
// may span.
//
//   infinitehbd  nodes of g GPUs on a datacenter-wide ring of optical k-hop links: every node
//                reaches the nodes within K hops, so a TP ring can bridge a run of fewer than K
//                faulty nodes; a run of K or more splits the ring (InfiniteHBD, SIGCOMM 2025)
//   nvl-36/72/576 switch-centric NVLink domains of 36/72/576 GPUs in nodes (trays) of 4: a TP
//                group lies inside one domain; a fault removes its node's GPUs from the domain
//   tpuv4        cubes of 64 chips (16 hosts of 4) joined by a MEMS OCS: a TP slice lies inside
//                healthy cubes; a cube with a faulty host is lost to TP
//   dgx          nodes of 8 GPUs on one NVSwitch: TP at most 8
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "weightport/core/status.h"

namespace weightport::sim::hbd {

enum class ArchKind : uint8_t { kInfiniteHbd, kNvl, kTpuV4, kDgx };

struct ArchSpec {
  std::string name;
  ArchKind kind = ArchKind::kInfiniteHbd;
  int gpus_per_node = 4;
  // GPUs per HBD domain for nvl (36, 72, 576) and tpuv4 (64); 0 for the ring (one datacenter-wide
  // ring) and dgx (a node).
  int domain_gpus = 0;
  int k = 2;         // infinitehbd: hops each node reaches
  bool wrap = true;  // infinitehbd: the node sequence closes into a ring
};

// "infinitehbd" (k, gpus_per_node from the arguments), "nvl-36", "nvl-72", "nvl-576", "tpuv4",
// "dgx". Errors name the architecture and list the known ones.
Result<ArchSpec> MakeArch(std::string_view name, int k = 2, int ring_gpus_per_node = 4);
std::vector<std::string> ArchNames();

}  // namespace weightport::sim::hbd
