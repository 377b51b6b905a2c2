#include "weightport/topology/routing.h"

#include <algorithm>
#include <limits>
#include <map>
#include <queue>
#include <string>

namespace weightport::topology {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Costs are sums of small multiples of 0.5: paths within this of each other are equal.
constexpr double kTie = 1e-9;
constexpr double kSpinePenalty = 0.5;

uint64_t Mix(uint64_t a, uint64_t b) {
  // splitmix64 finaliser over the combination: cheap and well spread.
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull + (a << 6) + (a >> 2));
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One Dijkstra from `source`, stopping once every target is settled. Keeps, for every node, all
// the links that reach it on a shortest path, so the walk back can choose among them.
class ShortestPaths {
 public:
  ShortestPaths(const Graph& graph, const std::vector<double>& link_cost) : g_(graph), cost_(link_cost) {}

  void Run(int source, std::vector<int> targets) {
    for (int n : touched_) dist_[n] = kInf, preds_[n].clear(), settled_[n] = false;
    touched_.clear();
    const size_t n = g_.nodes().size();
    if (dist_.size() != n) dist_.assign(n, kInf), preds_.assign(n, {}), settled_.assign(n, false);
    std::sort(targets.begin(), targets.end());
    targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
    size_t left = targets.size();
    using Item = std::pair<double, int>;
    std::priority_queue<Item, std::vector<Item>, std::greater<>> heap;
    Touch(source);
    dist_[source] = 0;
    heap.push({0, source});
    while (!heap.empty() && left > 0) {
      auto [d, u] = heap.top();
      heap.pop();
      if (settled_[u] || d > dist_[u]) continue;
      settled_[u] = true;
      if (std::binary_search(targets.begin(), targets.end(), u)) --left;
      // Host memory ends paths; it never forwards.
      if (u != source && g_.nodes()[u].kind == NodeKind::kHostMemory) continue;
      for (int l : g_.out_links(u)) {
        const int v = g_.links()[l].to;
        const double nd = d + cost_[l];
        Touch(v);
        if (nd < dist_[v] - kTie) {
          dist_[v] = nd;
          preds_[v].assign(1, l);
          heap.push({nd, v});
        } else if (nd <= dist_[v] + kTie && !settled_[v]) {
          preds_[v].push_back(l);
        }
      }
    }
  }

  bool Reached(int node) const { return node < static_cast<int>(dist_.size()) && dist_[node] < kInf; }
  double Dist(int node) const { return dist_[node]; }
  const std::vector<int>& Preds(int node) const { return preds_[node]; }

 private:
  void Touch(int n) {
    if (n < static_cast<int>(dist_.size()) && dist_[n] == kInf && preds_[n].empty()) touched_.push_back(n);
  }
  const Graph& g_;
  const std::vector<double>& cost_;
  std::vector<double> dist_;
  std::vector<std::vector<int>> preds_;
  std::vector<char> settled_;
  std::vector<int> touched_;
};

}  // namespace

const char* RoutingPolicyName(RoutingPolicy policy) {
  switch (policy) {
    case RoutingPolicy::kShortest:
      return "shortest";
    case RoutingPolicy::kEcmp:
      return "ecmp";
    case RoutingPolicy::kRailOptimised:
      return "rail";
  }
  return "?";
}

Result<RoutingPolicy> ParseRoutingPolicy(std::string_view name) {
  for (RoutingPolicy p : {RoutingPolicy::kShortest, RoutingPolicy::kEcmp, RoutingPolicy::kRailOptimised})
    if (name == RoutingPolicyName(p)) return p;
  return InvalidArgument("unknown routing policy '" + std::string(name) + "' (shortest, ecmp, rail)");
}

double Router::LinkCost(const Link& link) const {
  double c = link.cost;
  if (policy_ == RoutingPolicy::kRailOptimised && (graph_.nodes()[link.from].kind == NodeKind::kSpine ||
                                                   graph_.nodes()[link.to].kind == NodeKind::kSpine))
    c += kSpinePenalty;
  return c;
}

Result<Path> Router::Route(int from, int to) const {
  WP_ASSIGN_OR_RETURN(std::vector<Path> paths, RouteAll({{from, to}}));
  return std::move(paths[0]);
}

Result<std::vector<Path>> Router::RouteAll(const std::vector<std::pair<int, int>>& pairs) const {
  const int n = static_cast<int>(graph_.nodes().size());
  std::vector<double> cost(graph_.links().size());
  for (size_t l = 0; l < cost.size(); ++l) cost[l] = LinkCost(graph_.links()[l]);
  // Pairs grouped by source, so each source is searched once.
  std::map<int, std::vector<size_t>> by_source;
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto [a, b] = pairs[i];
    if (a < 0 || a >= n || b < 0 || b >= n)
      return InvalidArgument("route " + std::to_string(a) + " -> " + std::to_string(b) +
                             ": node index out of range (" + std::to_string(n) + " nodes)");
    by_source[a].push_back(i);
  }
  std::vector<Path> out(pairs.size());
  ShortestPaths search(graph_, cost);
  for (const auto& [source, indices] : by_source) {
    std::vector<int> targets;
    for (size_t i : indices) targets.push_back(pairs[i].second);
    search.Run(source, targets);
    for (size_t i : indices) {
      const int target = pairs[i].second;
      if (!search.Reached(target))
        return NotFound("no path from '" + graph_.nodes()[source].name + "' to '" +
                        graph_.nodes()[target].name + "' in topology '" + graph_.name() + "'");
      Path& path = out[i];
      path.cost = search.Dist(target);
      for (int v = target; v != source;) {
        const std::vector<int>& preds = search.Preds(v);
        size_t pick = 0;
        if (policy_ != RoutingPolicy::kShortest && preds.size() > 1)
          pick = Mix(Mix(static_cast<uint64_t>(source), static_cast<uint64_t>(target)),
                     static_cast<uint64_t>(v)) %
                 preds.size();
        const int l =
            policy_ == RoutingPolicy::kShortest ? *std::min_element(preds.begin(), preds.end()) : preds[pick];
        path.links.push_back(l);
        path.latency_us += graph_.links()[l].latency_us;
        v = graph_.links()[l].from;
      }
      std::reverse(path.links.begin(), path.links.end());
    }
  }
  return out;
}

}  // namespace weightport::topology
