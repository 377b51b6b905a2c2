#include "weightport/sim/hbd/ring_orchestrator.h"

#include <algorithm>
#include <functional>
#include <optional>

namespace weightport::sim::hbd {

RingOrchestrator::RingOrchestrator(const ArchSpec& arch, int tp, int max_stretch, std::vector<char> faulty)
    : arch_(arch),
      tp_(tp),
      per_ring_(tp / arch.gpus_per_node),
      max_stretch_(max_stretch),
      faulty_(std::move(faulty)),
      ring_of_(faulty_.size(), -1) {}

Result<RingOrchestrator> RingOrchestrator::Create(const ArchSpec& arch, const std::vector<char>& faulty,
                                                  int tp, int max_stretch) {
  if (arch.kind != ArchKind::kInfiniteHbd)
    return InvalidArgument("ring orchestration is for infinitehbd, not " + arch.name);
  if (tp <= arch.gpus_per_node || tp % arch.gpus_per_node != 0)
    return InvalidArgument("ring orchestration needs TP spanning whole nodes of " +
                           std::to_string(arch.gpus_per_node) + " GPUs (got TP " + std::to_string(tp) + ")");
  if (max_stretch < 0) return InvalidArgument("the most rings a repair may rebuild must be >= 0");
  WP_ASSIGN_OR_RETURN(TpPlacement first, PlaceTp(arch, faulty, tp, /*keep_groups=*/true));
  RingOrchestrator o(arch, tp, max_stretch, faulty);
  for (TpGroup& ring : first.tp_groups) {
    for (int node : ring.nodes) o.ring_of_[node] = static_cast<int>(o.rings_.size());
    o.rings_.push_back(std::move(ring));
  }
  for (int node = 0; node < static_cast<int>(faulty.size()); ++node) {
    o.healthy_nodes_ += !faulty[node];
    if (!faulty[node] && o.ring_of_[node] < 0) o.free_.insert(node);
  }
  return o;
}

double RingOrchestrator::waste_ratio() const {
  return healthy_nodes_ > 0 ? 1.0 - static_cast<double>(usable_gpus()) / healthy_gpus() : 0;
}

std::optional<int> RingOrchestrator::Step(int pos, int dir) const {
  const int n = static_cast<int>(faulty_.size());
  pos += dir;
  if (pos >= 0 && pos < n) return pos;
  if (!arch_.wrap) return std::nullopt;
  return (pos + n) % n;
}

int RingOrchestrator::Distance(int from, int to) const {
  const int n = static_cast<int>(faulty_.size());
  if (!arch_.wrap) return to >= from ? to - from : n;  // never within reach backwards
  return ((to - from) % n + n) % n;
}

void RingOrchestrator::SetFaulty(int node, bool down) {
  if (node < 0 || node >= static_cast<int>(faulty_.size()) || static_cast<bool>(faulty_[node]) == down)
    return;
  faulty_[node] = down;
  healthy_nodes_ += down ? -1 : 1;
  if (!down) {
    free_.insert(node);
    BuildAround(node);
    if (!free_.count(node) || static_cast<int>(free_.size()) < per_ring_) return;
    // Gather: re-cut the rings between this node and enough free nodes for one more ring.
    auto stretch = Stretch(node, node, per_ring_ - 1, -1);
    if (stretch && !stretch->empty()) Rebuild(std::move(stretch).value());
    return;
  }
  free_.erase(node);
  const int ring = ring_of_[node];
  if (ring < 0) return;
  // Borrow a free node: re-cut this ring and those between it and the nearest free node, so the
  // ring count stays. With none within reach, the ring alone is torn down.
  const std::vector<int>& nodes = rings_[ring].nodes;
  std::vector<int> stretch = Stretch(nodes.back(), nodes.front(), 1, ring).value_or(std::vector<int>{});
  stretch.push_back(ring);
  Rebuild(std::move(stretch));
}

std::optional<std::vector<int>> RingOrchestrator::Stretch(int forward_from, int backward_from, int needed,
                                                          int own) const {
  std::optional<std::vector<int>> best;
  for (int dir : {+1, -1}) {
    auto rings = WalkToFree(dir > 0 ? forward_from : backward_from, dir, needed, own);
    if (rings && (!best || rings->size() < best->size())) best = std::move(rings);
  }
  return best;
}

std::optional<std::vector<int>> RingOrchestrator::WalkToFree(int pos, int dir, int needed, int own) const {
  const int n = static_cast<int>(faulty_.size());
  std::vector<int> rings;
  int found = 0;
  // The walk may start on a faulty node (the one that just failed): the run it ends counts.
  int run = 0;
  for (std::optional<int> p = pos; p && run < n && faulty_[*p]; p = Step(*p, -dir)) ++run;
  if (run >= arch_.k) return std::nullopt;
  for (int step = 0; step < n - 1 && static_cast<int>(rings.size()) <= max_stretch_; ++step) {
    const std::optional<int> next = Step(pos, dir);
    if (!next) return std::nullopt;
    pos = *next;
    if (faulty_[pos]) {
      if (++run >= arch_.k) return std::nullopt;  // the chain cannot cross this run
      continue;
    }
    run = 0;
    const int r = ring_of_[pos];
    if (r < 0) {
      if (++found >= needed) return rings;
    } else if (r != own && std::find(rings.begin(), rings.end(), r) == rings.end()) {
      rings.push_back(r);
    }
  }
  return std::nullopt;
}

void RingOrchestrator::Rebuild(std::vector<int> rings) {
  std::vector<int> survivors;
  for (int r : rings)
    for (int member : rings_[r].nodes)
      if (!faulty_[member]) survivors.push_back(member);
  // Tear down from the highest index: TearDown moves the last ring into the hole.
  std::sort(rings.begin(), rings.end(), std::greater<>());
  rings.erase(std::unique(rings.begin(), rings.end()), rings.end());
  for (int r : rings) TearDown(r);
  for (int survivor : survivors)
    if (free_.count(survivor)) BuildAround(survivor);
}

void RingOrchestrator::TearDown(int ring) {
  ++rings_torn_down_;
  for (int node : rings_[ring].nodes) {
    ring_of_[node] = -1;
    if (!faulty_[node]) free_.insert(node);
  }
  // Keep rings_ dense: move the last ring into the hole.
  const int last = static_cast<int>(rings_.size()) - 1;
  if (ring != last) {
    rings_[ring] = std::move(rings_[last]);
    for (int node : rings_[ring].nodes) ring_of_[node] = ring;
  }
  rings_.pop_back();
}

void RingOrchestrator::AddRing(std::vector<int> nodes) {
  TpGroup ring;
  ring.nodes = std::move(nodes);
  for (size_t j = 0; j < ring.nodes.size(); ++j) {
    free_.erase(ring.nodes[j]);
    ring_of_[ring.nodes[j]] = static_cast<int>(rings_.size());
    // Bridged: a faulty node lies between two members (a skipped healthy node does not count).
    for (int d = 1; j > 0 && d < Distance(ring.nodes[j - 1], ring.nodes[j]); ++d)
      ring.bridged |= faulty_[(ring.nodes[j - 1] + d) % faulty_.size()] != 0;
  }
  rings_.push_back(std::move(ring));
  ++rings_built_;
}

void RingOrchestrator::BuildAround(int node) {
  if (!free_.count(node) || static_cast<int>(free_.size()) < per_ring_) return;
  // Walk back to the chain's first node: a free node whose free predecessor is out of reach.
  auto prev = [&](std::set<int>::iterator it) {
    if (it != free_.begin()) return std::prev(it);
    return arch_.wrap ? std::prev(free_.end()) : free_.end();
  };
  auto next = [&](std::set<int>::iterator it) {
    ++it;
    return it == free_.end() && arch_.wrap ? free_.begin() : it;
  };
  auto start = free_.find(node);
  for (size_t steps = 0; steps < free_.size(); ++steps) {
    auto p = prev(start);
    if (p == free_.end() || p == start || Distance(*p, *start) > arch_.k) break;
    start = p;
  }
  // Walk forward, cutting rings of per_ring_ nodes; a chain around the whole ring stops where it began.
  std::vector<int> chain{*start};
  for (auto it = start; chain.size() < free_.size();) {
    auto n = next(it);
    if (n == free_.end() || n == start || Distance(*it, *n) > arch_.k) break;
    chain.push_back(*n);
    it = n;
  }
  const size_t full = chain.size() / per_ring_ * per_ring_;
  for (size_t i = 0; i < full; i += per_ring_)
    AddRing(std::vector<int>(chain.begin() + i, chain.begin() + i + per_ring_));
}

}  // namespace weightport::sim::hbd
