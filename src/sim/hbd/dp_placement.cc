#include "weightport/sim/hbd/dp_placement.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace weightport::sim::hbd {
namespace {

// Distinct values among a few leaves (a DP group is small).
int Distinct(std::vector<int>& leaves) {
  std::sort(leaves.begin(), leaves.end());
  return static_cast<int>(std::unique(leaves.begin(), leaves.end()) - leaves.begin());
}

// Ring edges that cross a leaf, over every TP rank of one DP group.
int64_t CrossEdges(const std::vector<const TpGroup*>& members, int g, int tor_nodes, int tp) {
  std::vector<int> leaves(members.size());
  const int first = members[0]->first_gpu;
  const bool same_rails =
      std::all_of(members.begin(), members.end(), [&](const TpGroup* m) { return m->first_gpu == first; });
  int64_t edges = 0;
  if (same_rails) {
    // Rank t of every member is on rail (first + t) % g, so only the ToR group of node
    // (first + t) / g differs: count per node index, times the ranks on it.
    for (size_t j = 0; j < members[0]->nodes.size(); ++j) {
      for (size_t i = 0; i < members.size(); ++i) leaves[i] = members[i]->nodes[j] / tor_nodes;
      const int distinct = Distinct(leaves);
      const int ranks =
          std::min(tp, static_cast<int>(j + 1) * g - first) - std::max(0, static_cast<int>(j) * g - first);
      if (distinct > 1) edges += static_cast<int64_t>(distinct) * ranks;
    }
    return edges;
  }
  for (int t = 0; t < tp; ++t) {
    for (size_t i = 0; i < members.size(); ++i) {
      const TpGroup& m = *members[i];
      const int slot = m.first_gpu + t;
      leaves[i] = m.nodes[slot / g] / tor_nodes * g + slot % g;  // (ToR group, rail)
    }
    const int distinct = Distinct(leaves);
    if (distinct > 1) edges += distinct;
  }
  return edges;
}

// Sort key of a TP group: its rail offset, then the ToR group of each of its nodes.
std::vector<int> LeafKey(const TpGroup& group, int tor_nodes) {
  std::vector<int> key{group.first_gpu};
  for (int node : group.nodes) key.push_back(node / tor_nodes);
  return key;
}

// TP groups by leaf key, whole DP groups of identical keys first (no traffic crosses a ToR in
// them), then the rest in key order, so one short run does not shift every later group off its ToR.
std::vector<int> TorAwareOrder(const std::vector<TpGroup>& groups, int tor_nodes, int dp) {
  std::vector<int> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<std::vector<int>> keys;
  keys.reserve(order.size());
  for (const TpGroup& group : groups) keys.push_back(LeafKey(group, tor_nodes));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return keys[a] < keys[b]; });
  std::vector<int> pure, rest;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && keys[order[j]] == keys[order[i]]) ++j;
    const size_t whole = (j - i) / dp * dp;
    pure.insert(pure.end(), order.begin() + i, order.begin() + i + whole);
    rest.insert(rest.end(), order.begin() + i + whole, order.begin() + j);
    i = j;
  }
  pure.insert(pure.end(), rest.begin(), rest.end());
  return pure;
}

}  // namespace

int TorNodes(const ArchSpec& arch, int tor_gpus) {
  if (arch.domain_gpus > 0) {
    const int domains =
        std::max(1, static_cast<int>(std::lround(static_cast<double>(tor_gpus) / arch.domain_gpus)));
    return domains * arch.domain_gpus / arch.gpus_per_node;
  }
  return std::max(1, tor_gpus / arch.gpus_per_node);
}

int AutoDp(const ArchSpec& arch, int tor_gpus, int tp) {
  auto p = PlaceTp(arch, std::vector<char>(TorNodes(arch, tor_gpus), 0), tp, /*keep_groups=*/true);
  if (!p.ok()) return 1;
  const int same_rails = static_cast<int>(std::count_if(p->tp_groups.begin(), p->tp_groups.end(),
                                                        [](const TpGroup& g) { return g.first_gpu == 0; }));
  return std::max(1, same_rails);
}

Result<DpPlacement> PlaceDp(const ArchSpec& arch, const std::vector<TpGroup>& groups, int tp, int dp,
                            int tor_gpus, DpPolicy policy, double borrow_gpus) {
  if (!(borrow_gpus >= 0))
    return InvalidArgument("the borrow threshold must be >= 0 GPUs (got " + std::to_string(borrow_gpus) +
                           ")");
  if (dp < 1) return InvalidArgument("DP size must be >= 1 (got " + std::to_string(dp) + ")");
  if (tor_gpus < 1)
    return InvalidArgument("GPUs per ToR group must be >= 1 (got " + std::to_string(tor_gpus) + ")");
  const int g = arch.gpus_per_node;
  for (size_t i = 0; i < groups.size(); ++i) {
    const TpGroup& group = groups[i];
    if (group.first_gpu < 0 || group.first_gpu >= g ||
        static_cast<int64_t>(group.nodes.size()) * g < group.first_gpu + static_cast<int64_t>(tp))
      return InvalidArgument("TP group " + std::to_string(i) + " (first GPU " +
                             std::to_string(group.first_gpu) + ", " + std::to_string(group.nodes.size()) +
                             " nodes of " + std::to_string(g) + ") cannot hold TP " + std::to_string(tp));
  }
  const int tor_nodes = TorNodes(arch, tor_gpus);
  std::vector<int> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  if (policy == DpPolicy::kTorAware) order = TorAwareOrder(groups, tor_nodes, dp);
  DpPlacement out;
  out.dp = dp;
  const int candidates = static_cast<int>(order.size()) / dp;
  out.dp_groups = candidates;
  out.idle_tp_groups = static_cast<int>(order.size()) - candidates * dp;
  if (dp == 1 || candidates == 0) return out;  // no DP traffic
  int64_t cross = 0;
  std::vector<const TpGroup*> members(dp);
  const double saved = static_cast<double>(dp) * tp;
  for (int d = 0; d < candidates; ++d) {
    for (int i = 0; i < dp; ++i) members[i] = &groups[order[d * dp + i]];
    const int64_t edges = CrossEdges(members, arch.gpus_per_node, tor_nodes, tp);
    // A group that crosses leaves is formed only when the GPUs it saves outweigh its crossings.
    if (edges > 0 && !(saved > borrow_gpus * static_cast<double>(edges) / tp)) {
      ++out.declined_groups;
      continue;
    }
    cross += edges;
  }
  out.dp_groups = candidates - out.declined_groups;
  out.idle_tp_groups += out.declined_groups * dp;
  if (out.dp_groups == 0) return out;
  out.cross_tor_ratio = static_cast<double>(cross) / (static_cast<double>(out.dp_groups) * dp * tp);
  return out;
}

}  // namespace weightport::sim::hbd
