#include "weightport/sim/simulator.h"

#include <gtest/gtest.h>

namespace weightport::sim {
namespace {

using topology::Graph;
using topology::Node;
using topology::NodeKind;

constexpr double kGB = 1e9;
constexpr double kLatencyUs = 10;

// n hosts on one switch, 8 Gb/s (1 GB/s) each way, 10 us per link.
Graph Star(int hosts, double gbps = 8) {
  Graph g("star");
  const int sw = g.AddNode({"sw", NodeKind::kTor});
  for (int h = 0; h < hosts; ++h) {
    const int n = g.AddNode({"h" + std::to_string(h), NodeKind::kHostMemory});
    g.AddCable(n, sw, gbps, kLatencyUs);
  }
  return g;
}

struct StepSpec {
  Endpoint from;
  int to_rank;
  uint64_t bytes;
  int64_t after = -1;
};

// A plan of the given steps; only what the simulator reads is filled in.
Plan MakeTestPlan(int src_ranks, int dst_ranks, const std::vector<StepSpec>& specs,
                  uint64_t chunk = 64 << 20) {
  Plan plan;
  plan.options.chunk_bytes = chunk;
  for (int r = 0; r < src_ranks; ++r) plan.sources.push_back({{PlanSide::kSource, r}});
  for (int r = 0; r < dst_ranks; ++r) plan.destinations.push_back({{PlanSide::kDestination, r}});
  for (const StepSpec& s : specs) {
    PlanStep step;
    step.id = static_cast<uint32_t>(plan.steps.size());
    step.from = s.from;
    step.to_rank = s.to_rank;
    step.bytes = s.bytes;
    step.after = s.after;
    plan.steps.push_back(step);
  }
  return plan;
}

Result<SimResult> SimRun(const Plan& plan, const Graph& graph, SimOptions options = {}) {
  if (options.quantum_s < 0) options.quantum_s = 0;  // exact unless a test says otherwise
  WP_ASSIGN_OR_RETURN(EndpointMap map, MapRanksInOrder(graph, plan));
  return Simulate(plan, graph, map, options);
}

const Endpoint kSrc0{PlanSide::kSource, 0};
const Endpoint kSrc1{PlanSide::kSource, 1};
Endpoint Dst(int r) { return {PlanSide::kDestination, r}; }

TEST(Simulator, OneFlowTakesBytesOverRatePlusTheLatencyOfItsHops) {
  Graph g = Star(2);
  auto r = SimRun(MakeTestPlan(1, 1, {{kSrc0, 0, 1'000'000'000}}), g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->makespan_s, 1.0 + 2 * kLatencyUs * 1e-6, 1e-9);
  EXPECT_NEAR(r->lower_bound_s, 1.0, 1e-12);
  ASSERT_EQ(r->destinations.size(), 1u);
  EXPECT_EQ(r->destinations[0].bytes, 1'000'000'000u);
}

TEST(Simulator, TwoSendersShareTheReceiversLink) {
  // Two sources into one destination: its downlink carries 2 GB at 1 GB/s.
  Graph g = Star(3);
  auto r = SimRun(MakeTestPlan(2, 1, {{kSrc0, 0, 1'000'000'000}, {kSrc1, 0, 1'000'000'000}}), g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->makespan_s, 2.0, 1e-4);
  EXPECT_NEAR(r->lower_bound_s, 2.0, 1e-12);
}

TEST(Simulator, AFinishedFlowHandsItsShareToTheOthers) {
  // 1 GB and 3 GB into one receiver host: half each until the small one ends at 2 s, then the
  // big one alone with 2 GB left: 4 s.
  Graph g = Star(3);
  auto plan = MakeTestPlan(2, 2, {{kSrc0, 0, 1'000'000'000}, {kSrc1, 1, 3'000'000'000}});
  EndpointMap map{{g.FindNode("h0"), g.FindNode("h1")}, {g.FindNode("h2"), g.FindNode("h2")}};
  SimOptions o;
  o.quantum_s = 0;
  auto r = Simulate(plan, g, map, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->destinations[0].done_s, 2.0, 1e-4);
  EXPECT_NEAR(r->destinations[1].done_s, 4.0, 1e-4);
}

TEST(Simulator, ARelayChainPipelinesOneChunkPerHop) {
  // src -> d0 -> d1 -> d2, 1 GB each, 64 MiB chunks, every host at 1 GB/s: each hop starts one
  // chunk (plus its path latency) after the one before, and all run at the full rate.
  Graph g = Star(4);
  const uint64_t chunk = 64ull << 20;
  auto plan = MakeTestPlan(
      1, 3, {{kSrc0, 0, 1'000'000'000}, {Dst(0), 1, 1'000'000'000, 0}, {Dst(1), 2, 1'000'000'000, 1}}, chunk);
  auto r = SimRun(plan, g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const double hop_lat = 2 * kLatencyUs * 1e-6, chunk_s = static_cast<double>(chunk) / kGB;
  EXPECT_NEAR(r->destinations[0].done_s, 1.0 + hop_lat, 1e-6);
  EXPECT_NEAR(r->destinations[1].done_s, 1.0 + chunk_s + 2 * hop_lat, 1e-6);
  EXPECT_NEAR(r->destinations[2].done_s, 1.0 + 2 * chunk_s + 3 * hop_lat, 1e-6);
  // Store-and-forward of whole steps would have taken 3 s.
  EXPECT_LT(r->makespan_s, 1.2);
}

TEST(Simulator, ARelayIsNoFasterThanWhatFeedsIt) {
  // The source's uplink is shared with a second flow, so it feeds d0 at 0.5 GB/s; d0 -> d1 has a
  // free path but can only forward what arrives: d1 finishes a chunk after d0, not earlier.
  Graph g = Star(4);
  const uint64_t chunk = 8ull << 20;
  auto plan = MakeTestPlan(
      1, 3, {{kSrc0, 0, 1'000'000'000}, {Dst(0), 1, 1'000'000'000, 0}, {kSrc0, 2, 1'000'000'000}}, chunk);
  auto r = SimRun(plan, g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->destinations[0].done_s, 2.0, 1e-3);
  EXPECT_GT(r->destinations[1].done_s, r->destinations[0].done_s);
  EXPECT_NEAR(r->destinations[1].done_s, 2.0 + static_cast<double>(chunk) / kGB, 2e-3);
}

TEST(Simulator, StepAndPairGranularityAgreeWhenEveryPairHasOneStep) {
  Graph g = Star(4);
  auto plan =
      MakeTestPlan(1, 3, {{kSrc0, 0, 500'000'000}, {Dst(0), 1, 500'000'000, 0}, {kSrc0, 2, 300'000'000}});
  SimOptions pair, step;
  step.granularity = Granularity::kStep;
  auto a = SimRun(plan, g, pair);
  auto b = SimRun(plan, g, step);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int d = 0; d < 3; ++d) EXPECT_NEAR(a->destinations[d].done_s, b->destinations[d].done_s, 1e-9);
}

TEST(Simulator, ACoarseQuantumStaysCloseToTheExactAnswer) {
  // Eight flows of different sizes into one receiver: completions free capacity at different times.
  Graph g = Star(10);
  std::vector<StepSpec> steps;
  for (int i = 0; i < 8; ++i) steps.push_back({{PlanSide::kSource, i}, 0, 100'000'000ull * (i + 1)});
  auto plan = MakeTestPlan(8, 1, steps);
  SimOptions exact, coarse;
  exact.quantum_s = 0;
  coarse.quantum_s = 0.01;
  auto a = SimRun(plan, g, exact);
  auto b = SimRun(plan, g, coarse);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a->makespan_s, 3.6, 1e-3);  // 3.6 GB through one 1 GB/s link
  EXPECT_NEAR(b->makespan_s, a->makespan_s, 8 * 0.01);
  EXPECT_LT(b->stats.solves, a->stats.solves + 1);
}

TEST(Simulator, ACopyOnOneNodeUsesItsCopyEngine) {
  Graph g = Star(1);
  auto plan = MakeTestPlan(1, 1, {{kSrc0, 0, 2'000'000'000}});
  EndpointMap map{{g.FindNode("h0")}, {g.FindNode("h0")}};
  SimOptions o;
  o.quantum_s = 0;
  o.local_copy_bytes_per_s = 4e9;
  auto r = Simulate(plan, g, map, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->makespan_s, 0.5, 1e-9);
}

TEST(Simulator, ATimelineEndsWithEverythingDelivered) {
  Graph g = Star(3);
  auto r = SimRun(MakeTestPlan(2, 1, {{kSrc0, 0, 1'000'000'000}, {kSrc1, 0, 500'000'000}}), g);
  ASSERT_TRUE(r.ok());
  ASSERT_GE(r->timeline.size(), 10u);
  EXPECT_NEAR(r->timeline.back().delivered_bytes, 1.5e9, 1e3);
  for (size_t i = 1; i < r->timeline.size(); ++i)
    EXPECT_GE(r->timeline[i].delivered_bytes, r->timeline[i - 1].delivered_bytes - 1e-3);
  EXPECT_NE(TimelineSvg(*r, "t").find("<polyline"), std::string::npos);
}

TEST(Simulator, ARelayFedByManyLeadersKeepsUpWithAllOfThem) {
  // Four sources feed d0 (0.25 GB/s each through d0's 1 GB/s link); d0 relays all of it to d1 over
  // a free path. Each leader's bytes become available one chunk in, at slightly different times:
  // the relay must follow the sum of its leaders, finishing about four chunks after d0, not at the
  // rate it had when only the first leader had opened.
  Graph g = Star(6);
  const uint64_t chunk = 8ull << 20, part = 250'000'000;
  std::vector<StepSpec> steps;
  for (int s = 0; s < 4; ++s) steps.push_back({{PlanSide::kSource, s}, 0, part + s * 1'000'000ull});
  for (int s = 0; s < 4; ++s) steps.push_back({Dst(0), 1, part + s * 1'000'000ull, s});
  auto r = SimRun(MakeTestPlan(4, 2, steps, chunk), g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const double d0 = r->destinations[0].done_s, d1 = r->destinations[1].done_s;
  EXPECT_NEAR(d0, 1.006, 1e-3);
  EXPECT_GT(d1, d0);
  // At the end the relay still has the last chunk of each of the four steps to send.
  EXPECT_LT(d1, d0 + 5 * static_cast<double>(chunk) / kGB) << "the relay fell behind its leaders";
}

TEST(Simulator, ARelayOfHalfItsLeadersBytesIsFedAtHalfItsRate) {
  // s0 (3 GB/s) sends A and B, 3 GB each, to d0 as one pair; d0 relays only A to d1, so the relay
  // is fed 1.5 GB/s. A 10 GB flow from s1 to the same host as d1 (4 GB/s) gets the other 2.5 GB/s
  // until the relay ends, then all 4. The relay never finishes before what feeds it.
  Graph g("mixed");
  const int sw = g.AddNode({"sw", NodeKind::kTor});
  auto host = [&](const char* name, double gbps) {
    const int n = g.AddNode({name, NodeKind::kHostMemory});
    g.AddCable(n, sw, gbps, 0);
    return n;
  };
  const int s0 = host("s0", 24), s1 = host("s1", 64), d0 = host("d0", 64), d1 = host("d1", 32);
  auto plan = MakeTestPlan(2, 3,
                           {{kSrc0, 0, 3'000'000'000},
                            {kSrc0, 0, 3'000'000'000},
                            {Dst(0), 1, 3'000'000'000, 0},
                            {kSrc1, 2, 10'000'000'000}},
                           1 << 20);
  EndpointMap map{{s0, s1}, {d0, d1, d1}};
  SimOptions o;
  o.quantum_s = 0;
  auto r = Simulate(plan, g, map, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->destinations[0].done_s, 2.0, 1e-3);
  EXPECT_GE(r->destinations[1].done_s, r->destinations[0].done_s);
  EXPECT_NEAR(r->destinations[1].done_s, 2.0, 2e-3);
  EXPECT_NEAR(r->destinations[2].done_s, 2.0 + (10 - 2 * 2.5) / 4.0, 2e-3);
}

TEST(Simulator, ACappedRelaySpeedsUpWhenItsLeaderFinishes) {
  // s0's link is 0.5 GB/s: the relay to d1 follows at 0.5 GB/s one 100 MB chunk behind; when d0
  // has everything, the last chunk goes at d0's full 1 GB/s.
  Graph g("slow-source");
  const int sw = g.AddNode({"sw", NodeKind::kTor});
  std::vector<int> n;
  for (auto [name, gbps] : {std::pair{"s0", 4.0}, {"d0", 8.0}, {"d1", 8.0}}) {
    n.push_back(g.AddNode({name, NodeKind::kHostMemory}));
    g.AddCable(n.back(), sw, gbps, kLatencyUs);
  }
  auto plan = MakeTestPlan(1, 2, {{kSrc0, 0, 1'000'000'000}, {Dst(0), 1, 1'000'000'000, 0}}, 100'000'000);
  SimOptions o;
  o.quantum_s = 0;
  auto r = Simulate(plan, g, {{n[0]}, {n[1], n[2]}}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(r->destinations[0].done_s, 2.0 + 20e-6, 1e-6);
  // (The model hands a caught-up relay its leader's last bytes when the leader ends, without the
  // leader's 20 us path latency: microseconds, documented.)
  EXPECT_NEAR(r->destinations[1].done_s, 2.1 + 40e-6, 3e-5);
}

TEST(Simulator, PairsThatRelayToEachOtherInACycleStillFinish) {
  // Three pieces, each down a chain that starts at a different destination: the pairs d0 -> d1,
  // d1 -> d2 and d2 -> d0 each relay what another one carried. Each destination's link carries
  // 3 GB: 3 s at 1 GB/s.
  Graph g = Star(6);
  auto plan = MakeTestPlan(3, 3,
                           {{kSrc0, 0, 1'000'000'000},                   // 0: p to d0
                            {kSrc1, 2, 1'000'000'000},                   // 1: q to d2
                            {{PlanSide::kSource, 2}, 1, 1'000'000'000},  // 2: r to d1
                            {Dst(0), 1, 1'000'000'000, 0},               // 3: p d0 -> d1
                            {Dst(2), 0, 1'000'000'000, 1},               // 4: q d2 -> d0
                            {Dst(0), 1, 1'000'000'000, 4},               // 5: q d0 -> d1
                            {Dst(1), 2, 1'000'000'000, 3},               // 6: p d1 -> d2
                            {Dst(1), 2, 1'000'000'000, 2},               // 7: r d1 -> d2
                            {Dst(2), 0, 1'000'000'000, 7}},              // 8: r d2 -> d0
                           1 << 20);
  auto r = SimRun(plan, g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->stats.split_pairs, 0u);
  EXPECT_NEAR(r->lower_bound_s, 3.0, 1e-9);
  EXPECT_GE(r->makespan_s, 3.0);
  EXPECT_LT(r->makespan_s, 3.05);
}

TEST(Simulator, TheTimelineEndsAtTheMakespanWithEverythingDelivered) {
  Graph g = Star(2);
  SimOptions o;
  o.quantum_s = 0;
  o.timeline_points = 1;
  auto r = SimRun(MakeTestPlan(1, 1, {{kSrc0, 0, 1'000'000'000}}), g, o);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->timeline.empty());
  EXPECT_DOUBLE_EQ(r->timeline.back().t_s, r->makespan_s);
  EXPECT_DOUBLE_EQ(r->timeline.back().delivered_bytes, 1e9);
  for (size_t i = 1; i < r->timeline.size(); ++i) EXPECT_GE(r->timeline[i].t_s, r->timeline[i - 1].t_s);
}

TEST(Simulator, AnEmptyPlanTakesNoTimeAndListsEveryDestination) {
  Graph g = Star(3);
  auto r = SimRun(MakeTestPlan(1, 2, {}), g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->makespan_s, 0);
  EXPECT_EQ(r->destinations.size(), 2u);
}

TEST(Simulator, ARelayStepMustComeFromTheRankItsFeederDeliveredTo) {
  Graph g = Star(4);
  auto r = SimRun(MakeTestPlan(1, 3, {{kSrc0, 0, 1000}, {Dst(1), 2, 1000, 0}}), g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("plan step 1 relays from dst rank 1"), std::string::npos)
      << r.status().ToString();
}

TEST(Simulator, UnmappedRanksAreNamed) {
  Graph g = Star(2);
  auto plan = MakeTestPlan(1, 3, {{kSrc0, 2, 1000}});
  auto map = MapRanksInOrder(g, plan);
  ASSERT_FALSE(map.ok());
  EXPECT_NE(map.status().message().find("need 4"), std::string::npos) << map.status().ToString();
  EndpointMap partial{{g.FindNode("h0")}, {g.FindNode("h1")}};
  auto r = Simulate(plan, g, partial);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dst rank 2"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace weightport::sim
