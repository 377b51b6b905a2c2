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

TEST(FaultTrace, ASyntheticTraceHitsItsTargetRatio) {
  SyntheticOptions o;
  o.nodes = 2000;
  o.fault_ratio = 0.05;
  o.days = 200;
  auto t = SyntheticTrace(o);
  ASSERT_TRUE(t.ok());
  auto arch = MakeArch("dgx");
  auto positions = MapTraceNodes(*t, 2000, 0);
  ASSERT_TRUE(positions.ok());
  auto w = WasteOverTrace(*arch, 2000, 8, *t, *positions, 1.0);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_NEAR(w->mean_fault_ratio, 0.05, 0.005);
  // DGX at TP 8 wastes nothing: a fault takes only its own node.
  EXPECT_EQ(w->max, 0);
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

TEST(FaultTrace, RingsWasteLessThanNvlAndTpuAtTheSameFaultRatio) {
  // 1,152 GPUs (a multiple of 72, 64 and 4 x 16), TP 16, 5% of nodes down.
  auto ring = WasteAtFaultRatio(*MakeArch("infinitehbd", 3), 288, 16, 0.05, 20, 1);
  auto nvl = WasteAtFaultRatio(*MakeArch("nvl-72"), 288, 16, 0.05, 20, 1);
  auto tpu = WasteAtFaultRatio(*MakeArch("tpuv4"), 288, 16, 0.05, 20, 1);
  ASSERT_TRUE(ring.ok() && nvl.ok() && tpu.ok());
  EXPECT_LT(ring->mean, nvl->mean);
  EXPECT_LT(nvl->mean, tpu->mean);
  EXPECT_NEAR(ring->mean_fault_ratio, 0.05, 0.002);
}

}  // namespace
}  // namespace weightport::sim::hbd
