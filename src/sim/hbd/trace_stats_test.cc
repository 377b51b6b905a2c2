#include "weightport/sim/hbd/trace_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

namespace weightport::sim::hbd {
namespace {

TEST(TraceStats, AHandTrace) {
  // Over 10 days: a down 1-4 and (overlapping) 3-6, b 2-3, c zero-length at 5, d from the start to
  // day 1 and from day 9 to the end. Faulty: 1 on [0,1), 1 on [1,2), 2 on [2,3), 1 on [3,6), 0 on
  // [6,9), 1 on [9,10): mean (1 + 1 + 2 + 3 + 1) / 10 = 0.8.
  auto t = ParseFaultTrace(nlohmann::json::parse(R"([
    {"node_id": "a", "event_time": 1, "event_type": "fault_start"},
    {"node_id": "a", "event_time": 3, "event_type": "fault_start"},
    {"node_id": "a", "event_time": 4, "event_type": "fault_end"},
    {"node_id": "a", "event_time": 6, "event_type": "fault_end"},
    {"node_id": "b", "event_time": 2, "event_type": "fault_start"},
    {"node_id": "b", "event_time": 3, "event_type": "fault_end"},
    {"node_id": "c", "event_time": 5, "event_type": "fault_end"},
    {"node_id": "c", "event_time": 5, "event_type": "fault_start"},
    {"node_id": "d", "event_time": 1, "event_type": "fault_end"},
    {"node_id": "d", "event_time": 9, "event_type": "fault_start"},
    {"node_id": "e", "event_time": 10, "event_type": "fault_end"},
    {"node_id": "e", "event_time": 10, "event_type": "fault_start"}])"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto s = ComputeTraceStats(*t, 20);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->servers, 20);
  EXPECT_EQ(s->servers_listed, 5);
  EXPECT_EQ(s->faults, 7);
  EXPECT_EQ(s->zero_length_faults, 2);  // c, and e at the last instant
  EXPECT_EQ(s->overlapping_faults, 1);
  EXPECT_EQ(s->open_at_start, 1);
  EXPECT_EQ(s->open_at_end, 1);
  EXPECT_DOUBLE_EQ(s->span_days, 10);
  EXPECT_DOUBLE_EQ(s->mean_faulty, 0.8);
  EXPECT_EQ(s->max_faulty, 2);
  EXPECT_EQ(s->p99_faulty, 2);  // 2 for a tenth of the time
  EXPECT_FALSE(ComputeTraceStats(*t, 4).ok());
}

// The statistics of a synthetic trace against a count made another way: at the middle of every
// stretch between two event times, the servers with a fault covering it, by a look at every fault.
TEST(TraceStats, ASyntheticTraceAgainstABruteForceCount) {
  SyntheticOptions o;
  o.nodes = 60;
  o.fault_ratio = 0.05;
  o.mean_fault_days = 3;
  o.days = 200;
  o.seed = 5;
  auto t = SyntheticTrace(o);
  ASSERT_TRUE(t.ok());
  auto s = ComputeTraceStats(*t, 80);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // The synthetic trace's last event is before its end (o.days); the span is to the last event.
  std::set<double> times = {0, s->span_days};
  for (const Fault& f : t->faults) times.insert(f.start), times.insert(std::min(f.end, s->span_days));
  std::vector<std::pair<int, double>> at;  // (faulty servers, days)
  double weighted = 0;
  for (auto it = times.begin(); std::next(it) != times.end(); ++it) {
    const double from = *it, to = *std::next(it), mid = (from + to) / 2;
    std::set<int> down;
    for (const Fault& f : t->faults)
      if (f.start <= mid && mid < f.end) down.insert(f.node);
    at.push_back({static_cast<int>(down.size()), to - from});
    weighted += down.size() * (to - from);
  }
  std::sort(at.begin(), at.end());
  double cumulative = 0;
  int p99 = -1;
  for (const auto& [count, days] : at)
    if ((cumulative += days) >= 0.99 * s->span_days && p99 < 0) p99 = count;
  EXPECT_NEAR(s->mean_faulty, weighted / s->span_days, 1e-9);
  EXPECT_EQ(s->max_faulty, at.back().first);
  EXPECT_EQ(s->p99_faulty, p99);
  EXPECT_NEAR(s->mean_faulty / 60, 0.05, 0.015);  // and near the target
  EXPECT_EQ(s->servers_listed, static_cast<int>(t->node_ids.size()));
  EXPECT_EQ(s->zero_length_faults, 0);
}

}  // namespace
}  // namespace weightport::sim::hbd
