#include "weightport/sim/hbd/fault_trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <unordered_map>

#include "weightport/core/json_util.h"

namespace weightport::sim::hbd {
namespace {

void SortEvents(std::vector<FaultEvent>& events) {
  std::stable_sort(events.begin(), events.end(), [](const FaultEvent& a, const FaultEvent& b) {
    return a.day != b.day ? a.day < b.day : (!a.start && b.start);
  });
}

}  // namespace

Result<FaultTrace> ParseFaultTrace(const nlohmann::json& json) {
  using namespace json_util;
  if (!json.is_array()) return InvalidArgument("fault trace: expected a JSON list of events");
  FaultTrace t;
  std::unordered_map<std::string, int> index;
  for (size_t i = 0; i < json.size(); ++i) {
    const std::string path = At("fault trace", i);
    const Json& e = json[i];
    WP_RETURN_IF_ERROR(CheckKeys(e, {"node_id", "event_time", "event_type", "fault_type"}, path));
    WP_ASSIGN_OR_RETURN(std::string id, GetString(e, "node_id", path));
    WP_ASSIGN_OR_RETURN(double day, GetDouble(e, "event_time", path));
    WP_ASSIGN_OR_RETURN(std::string type, GetString(e, "event_type", path));
    if (!(day >= 0) || !std::isfinite(day))
      return InvalidArgument(path + ".event_time: must be a time >= 0 in days");
    if (type != "fault_start" && type != "fault_end")
      return InvalidArgument(path + ".event_type: '" + type + "' is neither fault_start nor fault_end");
    auto [it, inserted] = index.emplace(id, static_cast<int>(t.node_ids.size()));
    if (inserted) t.node_ids.push_back(id);
    t.events.push_back({day, it->second, type == "fault_start"});
    t.days = std::max(t.days, day);
  }
  SortEvents(t.events);
  return t;
}

nlohmann::json FaultTraceToJson(const FaultTrace& trace) {
  nlohmann::json out = nlohmann::json::array();
  for (const FaultEvent& e : trace.events)
    out.push_back({{"node_id", trace.node_ids[e.node]},
                   {"event_time", e.day},
                   {"event_type", e.start ? "fault_start" : "fault_end"},
                   {"fault_type", {{"Level", "synthetic"}, {"Class", "node"}, {"Desc", "generated"}}}});
  return out;
}

double ExpectedTraceEvents(const SyntheticOptions& o) {
  return o.nodes * (1 + 2 * o.days * o.fault_ratio / o.mean_fault_days);
}

Result<FaultTrace> SyntheticTrace(const SyntheticOptions& o) {
  if (o.nodes < 1 || !(o.fault_ratio > 0 && o.fault_ratio < 1) || !(o.mean_fault_days > 0) || !(o.days > 0))
    return InvalidArgument(
        "synthetic trace: nodes >= 1, 0 < fault ratio < 1, mean fault duration > 0 and days > 0");
  const double expected = ExpectedTraceEvents(o);
  const auto too_many = [&](const std::string& what) {
    char figures[160];
    std::snprintf(figures, sizeof figures, "nodes %d, days %g, fault_ratio %g, mean_fault_days %g", o.nodes,
                  o.days, o.fault_ratio, o.mean_fault_days);
    return InvalidArgument("synthetic trace: " + what + " events (" + figures + "), over the limit of " +
                           std::to_string(static_cast<int64_t>(kMaxTraceEvents)) +
                           ": fewer nodes or days, or longer faults");
  };
  if (!(expected <= kMaxTraceEvents)) {
    char n[32];
    std::snprintf(n, sizeof n, "%.3g", expected);
    return too_many(std::string("about ") + n);
  }
  FaultTrace t;
  std::mt19937_64 rng(o.seed);
  const double mean_up = o.mean_fault_days * (1 - o.fault_ratio) / o.fault_ratio;
  std::exponential_distribution<double> up(1 / mean_up), down(1 / o.mean_fault_days);
  std::bernoulli_distribution starts_down(o.fault_ratio);
  for (int n = 0; n < o.nodes; ++n) {
    t.node_ids.push_back("node-" + std::to_string(n));
    bool is_down = starts_down(rng);
    if (is_down) t.events.push_back({0, n, true});
    for (double day = 0;;) {
      day += is_down ? down(rng) : up(rng);
      if (day >= o.days) break;
      is_down = !is_down;
      t.events.push_back({day, n, is_down});
      if (static_cast<double>(t.events.size()) > kMaxTraceEvents) return too_many("more than the expected");
    }
  }
  SortEvents(t.events);
  t.days = o.days;
  return t;
}

Result<std::vector<int>> MapTraceNodes(const FaultTrace& trace, int cluster_nodes, uint64_t seed) {
  const int n = static_cast<int>(trace.node_ids.size());
  if (cluster_nodes < 1) return InvalidArgument("the cluster has no nodes to map a fault trace onto");
  std::vector<int> order(cluster_nodes);
  std::iota(order.begin(), order.end(), 0);
  if (seed != 0) std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  // More trace nodes than cluster nodes (a cluster of bigger nodes): they share nodes in turn, and a
  // node is down while any of its trace nodes is.
  std::vector<int> positions(n);
  for (int i = 0; i < n; ++i) positions[i] = order[i % cluster_nodes];
  return positions;
}

FaultDraws::FaultDraws(int nodes, double ratio, uint64_t seed) : order_(std::max(0, nodes)), rng_(seed) {
  std::iota(order_.begin(), order_.end(), 0);
  down_ = std::clamp(static_cast<int>(std::lround(ratio * nodes)), 0, static_cast<int>(order_.size()));
}

std::vector<char> FaultDraws::Next() {
  std::shuffle(order_.begin(), order_.end(), rng_);
  std::vector<char> faulty(order_.size(), 0);
  for (int i = 0; i < down_; ++i) faulty[order_[i]] = 1;
  return faulty;
}

}  // namespace weightport::sim::hbd
