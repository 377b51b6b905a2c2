#include "weightport/sim/hbd/tor_orchestrator.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "weightport/sim/hbd/dp_placement.h"

namespace weightport::sim::hbd {
namespace {

// Healthy nodes of one ToR group, consecutive on the ring but for runs of fewer than K faults.
struct Block {
  std::vector<int> nodes;
  bool hard_before = false;  // a run of >= K faults (or the start of a broken ring) precedes it
};

// Ordered by value, then by crossings (ties go to fewer).
struct Cost {
  double value = std::numeric_limits<double>::infinity();
  int crossings = 0;
  bool operator<(const Cost& o) const {
    return value < o.value || (value == o.value && crossings < o.crossings);
  }
};

struct Step {
  int from = -1;         // remainder after the block before
  bool carried = false;  // that remainder crossed into this block
};

class BoundaryChoice {
 public:
  BoundaryChoice(const std::vector<Block>& blocks, int m, int g, double borrow)
      : blocks_(blocks), m_(m), g_(g), borrow_(borrow) {}

  // Least cost with `c0` nodes carried round the wrap into block 0 (c0 = 0: none; `cycle` false:
  // a broken ring, nothing wraps). Fills carried_[b]: block b's first node continues a ring.
  Cost Solve(int c0, bool cycle) {
    const size_t nb = blocks_.size();
    std::vector<std::vector<Step>> steps(nb, std::vector<Step>(m_));
    std::vector<Cost> cost(m_), next(m_);
    Cost start;
    start.value = c0 > 0 ? borrow_ : 0;
    start.crossings = c0 > 0 ? 1 : 0;
    for (size_t b = 0; b < nb; ++b) {
      std::fill(next.begin(), next.end(), Cost{});
      const int count = static_cast<int>(blocks_[b].nodes.size() % m_);
      auto relax = [&](int from, int in, bool carried, Cost c) {
        Cost& slot = next[(in + count) % m_];
        if (c < slot) slot = c, steps[b][(in + count) % m_] = {from, carried};
      };
      if (b == 0) {
        relax(c0, c0, c0 > 0, start);
      } else {
        for (int r = 0; r < m_; ++r) {
          if (cost[r].value == std::numeric_limits<double>::infinity()) continue;
          relax(r, 0, false, {cost[r].value + static_cast<double>(g_) * r, cost[r].crossings});
          if (r > 0 && !blocks_[b].hard_before)
            relax(r, r, true, {cost[r].value + borrow_, cost[r].crossings + 1});
        }
      }
      std::swap(cost, next);
    }
    Cost best;
    int end = -1;
    for (int r = 0; r < m_; ++r) {
      if (cycle && c0 > 0 && r != c0) continue;  // the remainder is what wrapped into block 0
      Cost c = cost[r];
      if (c0 == 0) c.value += static_cast<double>(g_) * r;
      if (c < best) best = c, end = r;
    }
    carried_.assign(nb, 0);
    for (size_t b = nb; b-- > 0 && end >= 0;) {
      carried_[b] = steps[b][end].carried;
      end = steps[b][end].from;
    }
    return best;
  }
  const std::vector<char>& carried() const { return carried_; }

 private:
  const std::vector<Block>& blocks_;
  int m_, g_;
  double borrow_;
  std::vector<char> carried_;
};

// Cuts rings of m nodes from `walk` (healthy nodes in order), the partial ring dropped where
// drop_before is set and at the end.
void Cut(const std::vector<std::pair<int, bool>>& walk, int m, int n, int g, TpPlacement& p) {
  std::vector<int> ring;
  for (auto [node, drop_before] : walk) {
    if (drop_before) ring.clear();
    ring.push_back(node);
    if (static_cast<int>(ring.size()) < m) continue;
    AddRing(std::move(ring), n, g, /*keep=*/true, p);
    ring.clear();
  }
}

}  // namespace

int CrossingGroups(const std::vector<TpGroup>& groups, int tor_nodes) {
  return static_cast<int>(std::count_if(groups.begin(), groups.end(), [&](const TpGroup& group) {
    return std::any_of(group.nodes.begin(), group.nodes.end(),
                       [&](int node) { return node / tor_nodes != group.nodes[0] / tor_nodes; });
  }));
}

Result<TorRingPlacement> PlaceRingTorAware(const ArchSpec& arch, const std::vector<char>& faulty, int tp,
                                           int tor_gpus, double borrow_gpus) {
  if (arch.kind != ArchKind::kInfiniteHbd)
    return InvalidArgument(arch.name + ": the ToR-aware ring placement is for infinitehbd only");
  if (tor_gpus < 1)
    return InvalidArgument("GPUs per ToR group must be >= 1 (got " + std::to_string(tor_gpus) + ")");
  if (!(borrow_gpus >= 0))
    return InvalidArgument("the borrow threshold must be >= 0 GPUs (got " + std::to_string(borrow_gpus) +
                           ")");
  const int g = arch.gpus_per_node;
  TorRingPlacement out;
  if (tp <= g || tp % g != 0) {  // inside nodes, or the error PlaceTp gives
    WP_ASSIGN_OR_RETURN(out.placement, PlaceTp(arch, faulty, tp, /*keep_groups=*/true));
    return out;
  }
  const int m = tp / g, n = static_cast<int>(faulty.size());
  const int tor_nodes = TorNodes(arch, tor_gpus);
  TpPlacement& p = out.placement;
  p.nodes = n;
  p.healthy_gpus = static_cast<int>(std::count(faulty.begin(), faulty.end(), 0)) * g;
  if (p.healthy_gpus == 0) return out;
  const RingWalkStart walk_start = RingStart(arch, faulty);
  const int start = walk_start.start;
  const bool broken = walk_start.broken;
  std::vector<Block> blocks;
  bool hard = true;
  for (int step = 0, run = 0; step < n; ++step) {
    const int i = (start + step) % n;
    if (faulty[i]) {
      if (++run >= arch.k) hard = true;
      continue;
    }
    run = 0;
    if (blocks.empty() || hard || i / tor_nodes != blocks.back().nodes.back() / tor_nodes)
      blocks.push_back({.hard_before = hard});
    hard = false;
    blocks.back().nodes.push_back(i);
  }
  // An unbroken ring wraps: a ring may cross from the last block into the first.
  const bool cycle = !broken && blocks.size() > 1 &&
                     blocks.front().nodes.front() / tor_nodes != blocks.back().nodes.back() / tor_nodes;
  BoundaryChoice choice(blocks, m, g, borrow_gpus);
  Cost best = choice.Solve(0, cycle);
  std::vector<char> carried = choice.carried();
  int wrapped = 0;
  for (int c0 = 1; cycle && c0 < m; ++c0) {
    if (Cost c = choice.Solve(c0, true); c < best) best = c, carried = choice.carried(), wrapped = c0;
  }
  std::vector<std::pair<int, bool>> walk;  // (node, the ring being filled ends before it)
  for (size_t b = 0; b < blocks.size(); ++b)
    for (size_t j = 0; j < blocks[b].nodes.size(); ++j)
      walk.push_back({blocks[b].nodes[j], j == 0 && !carried[b]});
  if (wrapped > 0) {  // the last `wrapped` nodes open the first ring
    std::rotate(walk.begin(), walk.end() - wrapped, walk.end());
    walk[0].second = true;
  }
  p.segments = broken ? static_cast<int>(std::count_if(blocks.begin(), blocks.end(),
                                                       [](const Block& b) { return b.hard_before; }))
                      : 1;
  Cut(walk, m, n, g, p);
  out.crossing_rings = CrossingGroups(p.tp_groups, tor_nodes);
  for (const TpGroup& group : p.tp_groups)
    for (size_t j = 1; j < group.nodes.size(); ++j)
      out.boundary_crossings += group.nodes[j] / tor_nodes != group.nodes[j - 1] / tor_nodes;
  return out;
}

}  // namespace weightport::sim::hbd
