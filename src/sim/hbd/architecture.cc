#include "weightport/sim/hbd/architecture.h"

namespace weightport::sim::hbd {

std::vector<std::string> ArchNames() {
  return {"infinitehbd", "nvl-36", "nvl-72", "nvl-576", "tpuv4", "dgx"};
}

Result<ArchSpec> MakeArch(std::string_view name, int k, int ring_gpus_per_node) {
  ArchSpec a;
  a.name = std::string(name);
  if (name == "infinitehbd") {
    if (k < 1) return InvalidArgument("infinitehbd: k must be >= 1 (got " + std::to_string(k) + ")");
    if (ring_gpus_per_node < 1) return InvalidArgument("infinitehbd: GPUs per node must be >= 1");
    a.kind = ArchKind::kInfiniteHbd;
    a.k = k;
    a.gpus_per_node = ring_gpus_per_node;
    return a;
  }
  for (int size : {36, 72, 576}) {
    if (name != "nvl-" + std::to_string(size)) continue;
    a.kind = ArchKind::kNvl;
    a.gpus_per_node = 4;  // a GB200 compute tray
    a.domain_gpus = size;
    return a;
  }
  if (name == "tpuv4") {
    a.kind = ArchKind::kTpuV4;
    a.gpus_per_node = 4;  // a TPU v4 host
    a.domain_gpus = 64;
    return a;
  }
  if (name == "dgx") {
    a.kind = ArchKind::kDgx;
    a.gpus_per_node = 8;
    return a;
  }
  std::string known;
  for (const std::string& n : ArchNames()) known += (known.empty() ? "" : ", ") + n;
  return NotFound("unknown HBD architecture '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace weightport::sim::hbd
