#include "weightport/sim/hbd/fault_trace.h"

#include <gtest/gtest.h>

#include <tuple>

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

nlohmann::json Events(std::initializer_list<std::tuple<const char*, double, const char*>> events) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [node, day, type] : events)
    out.push_back({{"node_id", node}, {"event_time", day}, {"event_type", type}, {"fault_type", {}}});
  return out;
}

// A zero-length fault listed end first (a sort by time alone may put it so) is still one fault,
// and replays down then up: it used to leave the node down for the rest of the trace.
TEST(FaultTrace, EqualTimesPairIntoAZeroLengthFault) {
  auto t = ParseFaultTrace(Events(
      {{"a", 2, "fault_end"}, {"a", 2, "fault_start"}, {"b", 3, "fault_start"}, {"b", 4, "fault_end"}}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->faults.size(), 2u);
  EXPECT_EQ(t->faults[0].node, 0);
  EXPECT_EQ(t->faults[0].start, 2);
  EXPECT_EQ(t->faults[0].end, 2);
  EXPECT_TRUE(t->faults[0].has_start && t->faults[0].has_end);
  ASSERT_EQ(t->events.size(), 4u);
  EXPECT_TRUE(t->events[0].start);
  EXPECT_FALSE(t->events[1].start);
  EXPECT_EQ(t->events[1].day, 2);
}

// Two faults of one node that overlap: each end closes the earliest open fault.
TEST(FaultTrace, OverlappingFaultsOfOneNodePairEarliestFirst) {
  auto t = ParseFaultTrace(Events({{"a", 1, "fault_start"},
                                   {"a", 2, "fault_start"},
                                   {"a", 3, "fault_end"},
                                   {"a", 4, "fault_end"},
                                   {"a", 4, "fault_start"},
                                   {"a", 5, "fault_end"}}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->faults.size(), 3u);
  EXPECT_EQ(t->faults[0].start, 1);
  EXPECT_EQ(t->faults[0].end, 3);
  EXPECT_EQ(t->faults[1].start, 2);
  EXPECT_EQ(t->faults[1].end, 4);
  EXPECT_EQ(t->faults[2].start, 4);  // starts where the one before ends: a start before an end at day 4
  EXPECT_EQ(t->faults[2].end, 5);
  ASSERT_EQ(t->events.size(), 6u);
  EXPECT_TRUE(t->events[3].start);
  EXPECT_EQ(t->events[3].day, 4);
}

// An end with no start is a fault from day 0; a start with no end lasts to the last event.
TEST(FaultTrace, FaultsOpenAtTheFirstAndLastInstants) {
  auto t = ParseFaultTrace(Events(
      {{"a", 0, "fault_start"}, {"b", 1.5, "fault_end"}, {"a", 6, "fault_end"}, {"c", 6, "fault_start"}}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->faults.size(), 3u);
  EXPECT_EQ(t->days, 6);
  const Fault& b = t->faults[1];  // by start: a (0), b (0), c (6)
  EXPECT_EQ(b.node, 1);
  EXPECT_FALSE(b.has_start);
  EXPECT_EQ(b.start, 0);
  EXPECT_EQ(b.end, 1.5);
  const Fault& c = t->faults[2];
  EXPECT_EQ(c.node, 2);
  EXPECT_FALSE(c.has_end);
  EXPECT_EQ(c.start, 6);
  EXPECT_EQ(c.end, 6);
  // The replay has b's made-up start at day 0 and no end for c; the JSON has neither.
  EXPECT_EQ(t->events.size(), 5u);
  auto again = ParseFaultTrace(FaultTraceToJson(*t));
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->faults.size(), 3u);
  EXPECT_EQ(FaultTraceToJson(*t).size(), 4u);
  EXPECT_FALSE(again->faults[1].has_start);
  EXPECT_FALSE(again->faults[2].has_end);
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
