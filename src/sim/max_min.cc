#include "sim/max_min.h"

#include <algorithm>
#include <queue>
#include <tuple>

namespace weightport::sim {

void MaxMinSolver::Solve(const std::vector<int>& active, const std::vector<std::vector<int>>& paths,
                         const std::vector<double>& cap, std::vector<double>& rate,
                         const std::vector<std::vector<Lead>>& leads) {
  const size_t links = capacity_.size();
  remaining_.assign(capacity_.begin(), capacity_.end());
  unfrozen_.assign(links, 0);
  version_.assign(links, 0);
  // Per link, the (active index, next) entries of the flows crossing it: one entry per crossing.
  first_.assign(links, -1);
  next_.clear();
  entry_flow_.clear();
  for (size_t i = 0; i < active.size(); ++i) {
    for (int l : paths[active[i]]) {
      next_.push_back(first_[l]);
      entry_flow_.push_back(static_cast<int>(i));
      first_[l] = static_cast<int>(next_.size()) - 1;
      ++unfrozen_[l];
    }
  }
  // (level, kind, id, version): kind 0 = a link fills, 1 = a flow reaches its cap.
  using Item = std::tuple<double, int, int, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> heap;
  std::vector<char> frozen(active.size(), 0);
  size_t left = active.size();
  for (size_t i = 0; i < active.size(); ++i) {
    const int f = active[i];
    if (cap[f] < kNoCap) {
      heap.push({std::max(0.0, cap[f]), 1, static_cast<int>(i), 0});
    } else if (paths[f].empty()) {
      rate[f] = kNoCap, frozen[i] = 1, --left;
    }
  }
  for (size_t l = 0; l < links; ++l)
    if (unfrozen_[l] > 0) heap.push({remaining_[l] / unfrozen_[l], 0, static_cast<int>(l), 0});

  // Coupling: per active follower, the leaders not yet frozen and the cap accumulated so far.
  std::vector<int> pending(active.size(), 0);
  std::vector<double> fed(active.size(), 0);
  std::vector<std::vector<std::pair<int, double>>> followers;
  if (!leads.empty()) {
    std::vector<int> index(leads.size(), -1);
    for (size_t i = 0; i < active.size(); ++i) index[active[i]] = static_cast<int>(i);
    followers.resize(active.size());
    for (size_t i = 0; i < active.size(); ++i)
      for (const Lead& lead : leads[active[i]]) {
        if (index[lead.leader] < 0) continue;
        followers[index[lead.leader]].push_back({static_cast<int>(i), lead.ratio});
        ++pending[i];
      }
  }
  std::vector<std::pair<size_t, double>> to_freeze;
  auto freeze_one = [&](size_t i, double level, double water) {
    frozen[i] = 1;
    --left;
    const int f = active[i];
    rate[f] = level;
    for (int l : paths[f]) {
      remaining_[l] = std::max(0.0, remaining_[l] - level);
      if (--unfrozen_[l] > 0) heap.push({remaining_[l] / unfrozen_[l], 0, l, ++version_[l]});
    }
    if (followers.empty()) return;
    for (auto [j, ratio] : followers[i]) {
      if (frozen[j]) continue;
      fed[j] += level * ratio;
      if (--pending[j] > 0) continue;
      if (fed[j] <= water) {
        to_freeze.push_back({static_cast<size_t>(j), fed[j]});
      } else {
        heap.push({fed[j], 1, j, 0});
      }
    }
  };
  // Freezes i and, transitively, followers whose last leader it was and whose feed is below the
  // water level.
  auto freeze = [&](size_t i, double level) {
    const double water = level;
    to_freeze.push_back({i, level});
    while (!to_freeze.empty()) {
      auto [j, r] = to_freeze.back();
      to_freeze.pop_back();
      if (!frozen[j]) freeze_one(j, std::min(r, cap[active[j]]), water);
    }
  };
  while (left > 0 && !heap.empty()) {
    auto [level, kind, id, version] = heap.top();
    heap.pop();
    if (kind == 1) {
      if (!frozen[id]) freeze(id, level);
      continue;
    }
    if (version != version_[id] || unfrozen_[id] == 0) continue;
    for (int e = first_[id]; e >= 0; e = next_[e])
      if (!frozen[entry_flow_[e]]) freeze(entry_flow_[e], level);
  }
}

}  // namespace weightport::sim
