#include "weightport/sim/hbd/fault_trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <numeric>
#include <random>
#include <tuple>
#include <unordered_map>

#include "weightport/core/json_util.h"

namespace weightport::sim::hbd {
namespace {

// By time; at equal times a start before an end.
bool EarlierEvent(const FaultEvent& a, const FaultEvent& b) {
  return a.day != b.day ? a.day < b.day : (a.start && !b.start);
}

}  // namespace

std::vector<Fault> PairFaults(std::vector<FaultEvent> events) {
  double last = 0;
  for (const FaultEvent& e : events) last = std::max(last, e.day);
  std::stable_sort(events.begin(), events.end(), [](const FaultEvent& a, const FaultEvent& b) {
    return a.node != b.node ? a.node < b.node : EarlierEvent(a, b);
  });
  std::vector<Fault> faults;
  std::deque<double> open;  // starts of the current node's open faults, earliest first
  for (size_t i = 0; i < events.size(); ++i) {
    const FaultEvent& e = events[i];
    if (e.start) {
      open.push_back(e.day);
    } else if (open.empty()) {
      faults.push_back({e.node, 0, e.day, /*has_start=*/false, /*has_end=*/true});
    } else {
      faults.push_back({e.node, open.front(), e.day});
      open.pop_front();
    }
    if (i + 1 == events.size() || events[i + 1].node != e.node) {
      for (double start : open)
        faults.push_back({e.node, start, last, /*has_start=*/true, /*has_end=*/false});
      open.clear();
    }
  }
  std::sort(faults.begin(), faults.end(), [](const Fault& a, const Fault& b) {
    return std::tie(a.start, a.node, a.end) < std::tie(b.start, b.node, b.end);
  });
  return faults;
}

std::vector<FaultEvent> ReplayEvents(const std::vector<Fault>& faults) {
  std::vector<FaultEvent> events;
  events.reserve(2 * faults.size());
  for (const Fault& f : faults) {
    events.push_back({f.start, f.node, true});
    if (f.has_end) events.push_back({f.end, f.node, false});
  }
  std::stable_sort(events.begin(), events.end(), EarlierEvent);
  return events;
}

Result<FaultTrace> ParseFaultTrace(const nlohmann::json& json) {
  using namespace json_util;
  if (!json.is_array()) return InvalidArgument("fault trace: expected a JSON list of events");
  FaultTrace t;
  std::unordered_map<std::string, int> index;
  std::vector<FaultEvent> events;
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
    events.push_back({day, it->second, type == "fault_start"});
    t.days = std::max(t.days, day);
  }
  t.faults = PairFaults(std::move(events));
  t.events = ReplayEvents(t.faults);
  return t;
}

nlohmann::json FaultTraceToJson(const FaultTrace& trace) {
  // The events the faults were paired from: no start for a fault open at day 0, no end for one
  // open at the end.
  std::vector<FaultEvent> events;
  for (const Fault& f : trace.faults) {
    if (f.has_start) events.push_back({f.start, f.node, true});
    if (f.has_end) events.push_back({f.end, f.node, false});
  }
  std::stable_sort(events.begin(), events.end(), EarlierEvent);
  nlohmann::json out = nlohmann::json::array();
  for (const FaultEvent& e : events)
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
  std::vector<FaultEvent> events;
  std::mt19937_64 rng(o.seed);
  const double mean_up = o.mean_fault_days * (1 - o.fault_ratio) / o.fault_ratio;
  std::exponential_distribution<double> up(1 / mean_up), down(1 / o.mean_fault_days);
  std::bernoulli_distribution starts_down(o.fault_ratio);
  for (int n = 0; n < o.nodes; ++n) {
    t.node_ids.push_back("node-" + std::to_string(n));
    bool is_down = starts_down(rng);
    if (is_down) events.push_back({0, n, true});
    for (double day = 0;;) {
      day += is_down ? down(rng) : up(rng);
      if (day >= o.days) break;
      is_down = !is_down;
      events.push_back({day, n, is_down});
      if (static_cast<double>(events.size()) > kMaxTraceEvents) return too_many("more than the expected");
    }
  }
  t.faults = PairFaults(std::move(events));
  // Faults open at the end last to the trace's end, not to the last event.
  for (Fault& f : t.faults)
    if (!f.has_end) f.end = o.days;
  t.events = ReplayEvents(t.faults);
  t.days = o.days;
  return t;
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
