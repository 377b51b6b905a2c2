#include "weightport/sim/hbd/cluster_eval.h"

#include <gtest/gtest.h>

#include "weightport/sim/hbd/trace_mapping.h"

namespace weightport::sim::hbd {
namespace {

EvalOptions Tp(int tp) {
  EvalOptions o;
  o.tp = tp;
  return o;
}

TEST(ClusterEval, ASyntheticTraceHitsItsTargetRatio) {
  SyntheticOptions o;
  o.nodes = 2000;
  o.fault_ratio = 0.05;
  o.days = 200;
  auto t = SyntheticTrace(o);
  ASSERT_TRUE(t.ok());
  auto arch = MakeArch("dgx");
  auto mapping = MapTrace(*t, 2000, 8, 2000, 8, 0);
  ASSERT_TRUE(mapping.ok()) << mapping.status().ToString();
  auto m = EvaluateTrace(*arch, 2000, *t, mapping->nodes, 1.0, Tp(8));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_NEAR(m->mean_fault_ratio, 0.05, 0.005);
  // DGX at TP 8 wastes nothing (a fault takes only its own node) and has no circuits to switch.
  EXPECT_EQ(m->waste.max, 0);
  EXPECT_EQ(m->reconfigurations, 0);
}

TEST(ClusterEval, RingsWasteLessThanNvlAndTpuAtTheSameFaultRatio) {
  // 1,152 GPUs (a multiple of 72, 64 and 4 x 16), TP 16, 5% of nodes down.
  auto ring = EvaluateAtFaultRatio(*MakeArch("infinitehbd", 3), 288, 0.05, 20, 1, Tp(16));
  auto nvl = EvaluateAtFaultRatio(*MakeArch("nvl-72"), 288, 0.05, 20, 1, Tp(16));
  auto tpu = EvaluateAtFaultRatio(*MakeArch("tpuv4"), 288, 0.05, 20, 1, Tp(16));
  ASSERT_TRUE(ring.ok() && nvl.ok() && tpu.ok());
  EXPECT_LT(ring->waste.mean, nvl->waste.mean);
  EXPECT_LT(nvl->waste.mean, tpu->waste.mean);
  EXPECT_NEAR(ring->mean_fault_ratio, 0.05, 0.002);
  EXPECT_EQ(ring->dp, 16);  // 256 GPUs per ToR group / TP 16
}

FaultTrace HandTrace() {
  // Three nodes: 0 fails on day 1 and returns on day 2; 1 fails on day 1.5 and returns on day 3;
  // 2 fails on day 2.5 and returns on day 2.75.
  FaultTrace t;
  t.node_ids = {"a", "b", "c"};
  t.faults = {{0, 1, 2}, {1, 1.5, 3}, {2, 2.5, 2.75}};
  t.events = ReplayEvents(t.faults);
  t.days = 3;
  return t;
}

TEST(ClusterEval, TpuCubesLostCountAsReconfigurations) {
  // Two cubes of 16 hosts; the trace's nodes on hosts 0 and 1 (cube 0) and 16 (cube 1). Cube 0 is
  // lost on day 1 (node a; b joining on day 1.5 changes nothing), cube 1 on day 2.5: 2 losses.
  auto m = EvaluateTrace(*MakeArch("tpuv4"), 32, HandTrace(), {{0}, {1}, {16}}, 0.25, Tp(16));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->reconfigurations, 2);
  EXPECT_DOUBLE_EQ(m->reconfiguration_s, 2 * 10e-3);
  EXPECT_DOUBLE_EQ(m->waste.max, 1.0);  // day 2.5: both cubes down
}

TEST(ClusterEval, RingReconfigurationsAreRingsRebuiltAfterTheFirstPlacement) {
  // 9 nodes, K = 2, TP 16: rings 0-3 and 4-7, node 8 free. Day 1, a (position 1) fails: ring 0-3
  // borrows the free 8 across the wrap: 8, 0, 2, 3 is built (1). Day 1.5, b (position 5) fails:
  // no free node is within reach, ring 4-7 is torn down and 4, 6, 7 idle. Day 2, a returns: with
  // 4, 6, 7 there are enough free nodes for a ring; the ring between (8, 0, 2, 3) is re-cut with
  // them: 8, 0, 1, 2 and 3, 4, 6, 7 (2, 3). Day 2.5, c (position 0) fails: nothing free within
  // reach, ring 8, 0, 1, 2 torn down. Day 2.75, c returns: 8, 0, 1, 2 again (4). Day 3, b returns
  // and stays free.
  auto m = EvaluateTrace(*MakeArch("infinitehbd", 2), 9, HandTrace(), {{1}, {5}, {0}}, 0.25, Tp(16));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->reconfigurations, 4);
  EXPECT_DOUBLE_EQ(m->reconfiguration_s, 4 * 80e-6);
  // Between day 1.5 and day 3 one ring of two is missing: waste 3 of 7 (or 8) healthy nodes.
  EXPECT_GT(m->waste.max, 0.3);
  // A greedy re-cut wastes less at some samples (it moves rings instead).
  ASSERT_TRUE(m->waste_recut.has_value());
  EXPECT_LE(m->waste_recut->mean, m->waste.mean);
}

FaultTrace TraceOf(int nodes, std::vector<Fault> faults, double days) {
  FaultTrace t;
  for (int n = 0; n < nodes; ++n) t.node_ids.push_back("n" + std::to_string(n));
  t.faults = std::move(faults);
  t.events = ReplayEvents(t.faults);
  t.days = days;
  return t;
}

// Node n of the trace on cluster node n.
std::vector<std::vector<int>> InOrder(int nodes) {
  std::vector<std::vector<int>> p(nodes);
  for (int n = 0; n < nodes; ++n) p[n] = {n};
  return p;
}

// Faulty nodes at each sample: DGX at TP 8 wastes nothing, so the fault ratio is all that moves.
double FaultRatio(const FaultTrace& t, int nodes, double sample_days) {
  auto m = EvaluateTrace(*MakeArch("dgx"), nodes, t, InOrder(static_cast<int>(t.node_ids.size())),
                         sample_days, Tp(8));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? m->mean_fault_ratio * m->samples * nodes : -1;  // node-samples down
}

// Samples at days 0, 0.5, ..., 4 (9). A zero-length fault is down at no sample; it used to keep its
// node down to the end (8 more node-samples here).
TEST(ClusterEval, ZeroLengthFaultsLeaveTheirNodeUp) {
  EXPECT_DOUBLE_EQ(FaultRatio(TraceOf(2, {{0, 1, 1}, {1, 1, 2}}, 4), 2, 0.5), 2);  // b at 1 and 1.5
  // One between samples, and one at a sample next to a longer fault of the same node.
  EXPECT_DOUBLE_EQ(FaultRatio(TraceOf(1, {{0, 1.2, 1.2}, {0, 2, 2}, {0, 2, 3}}, 4), 1, 0.5), 2);
}

// Overlapping faults of one node keep it down to the later end; a fault starting where the node's
// previous one ends keeps it down without a moment up (no second TPUv4 cube loss).
TEST(ClusterEval, OverlappingAndBackToBackFaultsOfOneNode) {
  EXPECT_DOUBLE_EQ(FaultRatio(TraceOf(1, {{0, 1, 3}, {0, 2, 3.5}}, 4), 1, 0.5), 5);  // 1 to 3
  EXPECT_DOUBLE_EQ(FaultRatio(TraceOf(1, {{0, 1, 2}, {0, 2, 3}}, 4), 1, 0.5), 4);
  auto tpu = EvaluateTrace(*MakeArch("tpuv4"), 32, TraceOf(1, {{0, 1, 2}, {0, 2, 3}}, 4), {{0}}, 0.5, Tp(16));
  ASSERT_TRUE(tpu.ok()) << tpu.status().ToString();
  EXPECT_EQ(tpu->reconfigurations, 1);
  // A zero-length fault is a fault: its cube is swapped out, though no sample sees it down.
  tpu = EvaluateTrace(*MakeArch("tpuv4"), 32, TraceOf(1, {{0, 1.2, 1.2}}, 4), {{0}}, 0.5, Tp(16));
  ASSERT_TRUE(tpu.ok()) << tpu.status().ToString();
  EXPECT_EQ(tpu->reconfigurations, 1);
  EXPECT_EQ(tpu->waste.max, 0);
}

// A fault from the first instant is down at the first sample; one ending at the last instant is up
// at the last; one starting there without an end is down at it.
TEST(ClusterEval, FaultsAtTheTracesFirstAndLastInstants) {
  EXPECT_DOUBLE_EQ(FaultRatio(TraceOf(1, {{0, 0, 1}}, 4), 1, 0.5), 2);  // 0 and 0.5
  EXPECT_DOUBLE_EQ(FaultRatio(TraceOf(1, {{0, 3, 4}}, 4), 1, 0.5), 2);  // 3 and 3.5
  EXPECT_DOUBLE_EQ(FaultRatio(TraceOf(1, {{0, 4, 4, true, false}}, 4), 1, 0.5), 1);
  EXPECT_DOUBLE_EQ(FaultRatio(TraceOf(1, {{0, 0, 2.5, false, true}}, 4), 1, 0.5), 5);
  // A trace server that takes two nodes down (an 8-GPU server on 4-GPU nodes) counts both.
  auto m = EvaluateTrace(*MakeArch("dgx"), 4, TraceOf(1, {{0, 0, 1}}, 4), {{2, 3}}, 0.5, Tp(8));
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(m->mean_fault_ratio * m->samples * 4, 4);
}

TEST(ClusterEval, Summaries) {
  Percentiles p = Summarise({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(p.mean, 2.5);
  EXPECT_DOUBLE_EQ(p.max, 4);
  EXPECT_DOUBLE_EQ(p.p99, 4);
  EXPECT_EQ(Summarise({}).max, 0);
  EXPECT_FALSE(EvaluateTrace(*MakeArch("dgx"), 4, HandTrace(), {{0}, {1}}, 1, Tp(8)).ok());
  EXPECT_FALSE(EvaluateTrace(*MakeArch("dgx"), 4, HandTrace(), {{0}, {1}, {2}}, 0, Tp(8)).ok());
}

// One event at 1e7 days sampled hourly would be 2.4e8 samples (the old code ran for hours); the
// count is checked before the replay.
TEST(ClusterEval, TracesOverTheSampleLimitAreRefused) {
  auto trace = ParseFaultTrace(nlohmann::json::parse(
      R"([{"node_id": "a", "event_time": 1e7, "event_type": "fault_start", "fault_type": {}}])"));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  auto samples = TraceSamples(*trace, 1.0 / 24);
  ASSERT_FALSE(samples.ok());
  EXPECT_NE(samples.status().message().find("takes 2.4e+08 samples, over the limit of 131072"),
            std::string::npos)
      << samples.status().message();
  auto arch = MakeArch("nvl-72");
  ASSERT_TRUE(arch.ok());
  auto m = EvaluateTrace(*arch, 16, *trace, {{0}}, 1.0 / 24, Tp(8));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), samples.status().message());
  EXPECT_EQ(*TraceSamples(*trace, 1e7), 2);
  EXPECT_FALSE(TraceSamples(*trace, 0).ok());
}

}  // namespace
}  // namespace weightport::sim::hbd
