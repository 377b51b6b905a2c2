#include "weightport/sim/hbd/tp_placement.h"

#include <algorithm>

namespace weightport::sim::hbd {
namespace {

int HealthyNodes(const std::vector<char>& faulty, size_t from, size_t to) {
  return static_cast<int>(std::count(faulty.begin() + from, faulty.begin() + to, 0));
}

// Groups inside one node: floor(g / tp) per healthy node.
void WithinNodes(const ArchSpec& arch, const std::vector<char>& faulty, int tp, bool keep, TpPlacement& p) {
  const int per_node = arch.gpus_per_node / tp;
  const int healthy = HealthyNodes(faulty, 0, faulty.size());
  p.groups = per_node * healthy;
  p.usable_gpus = p.groups * tp;
  if (!keep) return;
  for (int n = 0; n < static_cast<int>(faulty.size()); ++n)
    for (int i = 0; i < per_node && !faulty[n]; ++i)
      p.tp_groups.push_back({.nodes = {n}, .first_gpu = i * tp});
}

// Groups of one NVLink domain or TPU cube: consecutive GPU slots of its usable nodes.
void WithinDomain(const std::vector<int>& usable_nodes, int g, int tp, int groups, TpPlacement& p) {
  for (int i = 0; i < groups; ++i) {
    const int slot = i * tp;
    TpGroup group{.first_gpu = slot % g};
    for (int n = slot / g; n <= (slot + tp - 1) / g; ++n) group.nodes.push_back(usable_nodes[n]);
    p.tp_groups.push_back(std::move(group));
  }
}

Status PlaceRing(const ArchSpec& arch, const std::vector<char>& faulty, int tp, bool keep, TpPlacement& p) {
  const int g = arch.gpus_per_node;
  if (tp % g != 0)
    return InvalidArgument("infinitehbd: TP " + std::to_string(tp) + " spans nodes of " + std::to_string(g) +
                           " GPUs and must be a multiple of it");
  const int m = tp / g;  // nodes per TP ring
  const int n = static_cast<int>(faulty.size());
  const RingWalkStart walk_start = RingStart(arch, faulty);
  const int start = walk_start.start;
  const bool broken = walk_start.broken;
  if (!broken && HealthyNodes(faulty, 0, faulty.size()) == 0) return Status::Ok();
  std::vector<int> segment;  // healthy nodes of the current segment, in order
  auto close = [&] {
    if (segment.empty()) return;
    ++p.segments;
    const size_t full = segment.size() / m * m;
    for (size_t i = 0; i < full; i += m)
      AddRing(std::vector<int>(segment.begin() + i, segment.begin() + i + m), n, g, keep, p);
    segment.clear();
  };
  int run = 0;
  for (int step = 0; step < n; ++step) {
    const int i = (start + step) % n;
    if (faulty[i]) {
      if (++run == arch.k) close();
      continue;
    }
    run = 0;
    segment.push_back(i);
  }
  close();
  return Status::Ok();
}

}  // namespace

RingWalkStart RingStart(const ArchSpec& arch, const std::vector<char>& faulty) {
  const int n = static_cast<int>(faulty.size());
  RingWalkStart out{.broken = !arch.wrap};
  for (int i = 0, run = 0; arch.wrap && i < 2 * n && !out.broken; ++i) {
    run = faulty[i % n] ? run + 1 : 0;
    if (run >= arch.k && run < n) out = {.start = (i + 1) % n, .broken = true};
  }
  return out;
}

void AddRing(std::vector<int> nodes, int n, int g, bool keep, TpPlacement& p) {
  TpGroup group{.nodes = std::move(nodes)};
  for (size_t j = 1; j < group.nodes.size(); ++j)
    group.bridged |= (group.nodes[j] - group.nodes[j - 1] + n) % n != 1;
  p.bridged_groups += group.bridged;
  ++p.groups;
  p.usable_gpus += static_cast<int>(group.nodes.size()) * g;
  if (keep) p.tp_groups.push_back(std::move(group));
}

Result<TpPlacement> PlaceTp(const ArchSpec& arch, const std::vector<char>& faulty, int tp, bool keep_groups) {
  if (tp < 1) return InvalidArgument("TP must be >= 1 (got " + std::to_string(tp) + ")");
  TpPlacement p;
  p.nodes = static_cast<int>(faulty.size());
  p.healthy_gpus = HealthyNodes(faulty, 0, faulty.size()) * arch.gpus_per_node;
  const int g = arch.gpus_per_node;
  // Small TP on a ring or a DGX stays inside nodes; NVLink domains and TPU cubes place by domain.
  if (tp <= g && (arch.kind == ArchKind::kInfiniteHbd || arch.kind == ArchKind::kDgx)) {
    WithinNodes(arch, faulty, tp, keep_groups, p);
    return p;
  }
  switch (arch.kind) {
    case ArchKind::kInfiniteHbd:
      WP_RETURN_IF_ERROR(PlaceRing(arch, faulty, tp, keep_groups, p));
      break;
    case ArchKind::kDgx:
      break;  // TP larger than a node does not fit its NVSwitch domain: nothing usable
    case ArchKind::kNvl:
    case ArchKind::kTpuV4: {
      const int per_domain = arch.domain_gpus / g;  // nodes per domain
      for (size_t d = 0; d + per_domain <= faulty.size(); d += per_domain) {
        const int healthy = HealthyNodes(faulty, d, d + per_domain);
        // A TPU cube with a faulty host cannot hold a TP slice; an NVLink domain keeps the rest.
        const int gpus = arch.kind == ArchKind::kTpuV4 && healthy < per_domain ? 0 : healthy * g;
        const int groups = tp <= arch.domain_gpus ? gpus / tp : 0;
        p.groups += groups;
        p.usable_gpus += groups * tp;
        if (keep_groups && groups > 0) {
          std::vector<int> usable;
          for (size_t n = d; n < d + per_domain; ++n)
            if (!faulty[n]) usable.push_back(static_cast<int>(n));
          WithinDomain(usable, g, tp, groups, p);
        }
      }
      break;
    }
  }
  return p;
}

}  // namespace weightport::sim::hbd
