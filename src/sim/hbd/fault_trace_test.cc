#include "weightport/sim/hbd/fault_trace.h"

#include <gtest/gtest.h>

namespace weightport::sim::hbd {
namespace {

TEST(FaultTrace, ParsesThePublicFormatAndRoundTrips) {
  auto j = nlohmann::json::parse(R"([
    {"node_id": "b", "event_time": 2.5, "event_type": "fault_end", "fault_type": {"Level": "x"}},
    {"node_id": "a", "event_time": 1.0, "event_type": "fault_start", "fault_type": {}},
    {"node_id": "b", "event_time": 0.5, "event_type": "fault_start", "fault_type": {}}])");
  auto t = ParseFaultTrace(j);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->node_ids, (std::vector<std::string>{"b", "a"}));
  ASSERT_EQ(t->events.size(), 3u);
  EXPECT_EQ(t->events[0].day, 0.5);
  EXPECT_EQ(t->events[2].start, false);
  EXPECT_EQ(t->days, 2.5);
  auto again = ParseFaultTrace(FaultTraceToJson(*t));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->events.size(), 3u);
}

TEST(FaultTrace, BadEventsAreNamed) {
  auto t = ParseFaultTrace(
      nlohmann::json::parse(R"([{"node_id": "a", "event_time": 1, "event_type": "reboot"}])"));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("fault trace[0].event_type"), std::string::npos)
      << t.status().ToString();
  EXPECT_FALSE(ParseFaultTrace(nlohmann::json::parse(
                                   R"([{"node_id": "a", "event_time": -1, "event_type": "fault_end"}])"))
                   .ok());
  EXPECT_FALSE(ParseFaultTrace(nlohmann::json::parse(R"({"node_id": "a"})")).ok());
}

TEST(FaultTrace, TraceNodesMapOntoDistinctClusterNodes) {
  SyntheticOptions o;
  o.nodes = 50;
  auto t = SyntheticTrace(o);
  auto p = MapTraceNodes(*t, 80, 7);
  ASSERT_TRUE(p.ok());
  std::vector<int> sorted = *p;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
  // Bigger nodes: trace nodes share cluster nodes in turn.
  auto shared = MapTraceNodes(*t, 40, 7);
  ASSERT_TRUE(shared.ok());
  ASSERT_EQ(shared->size(), t->node_ids.size());
  for (int p : *shared) EXPECT_LT(p, 40);
  EXPECT_FALSE(MapTraceNodes(*t, 0, 7).ok());
}

// Options each plausible alone that multiply into billions of events are refused before any event
// is drawn (they aborted with std::bad_alloc after taking 4 GB).
TEST(FaultTrace, SyntheticTracesOverTheEventLimitAreRefused) {
  const auto error = [](SyntheticOptions o) {
    auto t = SyntheticTrace(o);
    return t.ok() ? std::string("(ok)") : t.status().message();
  };
  SyntheticOptions days;
  days.days = 1e9;
  EXPECT_NE(
      error(days).find("about 8e+09 events (nodes 400, days 1e+09, fault_ratio 0.02, mean_fault_days 2), "
                       "over the limit of 1048576"),
      std::string::npos)
      << "[" << error(days) << "]";
  SyntheticOptions short_faults;
  short_faults.mean_fault_days = 1e-9;
  EXPECT_NE(error(short_faults).find("over the limit of 1048576"), std::string::npos) << error(short_faults);
  SyntheticOptions many;
  many.nodes = 4194304;
  many.fault_ratio = 0.5;
  EXPECT_NE(error(many).find("nodes 4194304"), std::string::npos) << error(many);
  SyntheticOptions fine;  // the defaults: ~3,200 events
  EXPECT_LT(ExpectedTraceEvents(fine), 4000);
  EXPECT_EQ(error(fine), "(ok)");
}

}  // namespace
}  // namespace weightport::sim::hbd
