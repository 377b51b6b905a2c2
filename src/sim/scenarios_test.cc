#include "weightport/sim/scenarios.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "weightport/plan/planner.h"

namespace weightport::sim {
namespace {

Result<SimResult> Simulated(const Scenario& s) { return Simulate(s.plan, s.graph, s.endpoints); }

TEST(Scenarios, ASmallKimiLikeUpdateRunsNearItsBound) {
  auto s = BuildScenario(
      "kimi-k2-update",
      {{"layers", 2}, {"experts", 16}, {"src_pp", 2}, {"src_ep", 8}, {"dst_replicas", 2}, {"dst_ep", 4}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->endpoints.src_nodes.size(), 16u);
  EXPECT_EQ(s->endpoints.dst_nodes.size(), 8u);
  EXPECT_TRUE(CheckCoverage(s->plan).ok());
  auto r = Simulated(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(r->makespan_s, r->lower_bound_s);
  EXPECT_LT(r->makespan_s, 1.2 * r->lower_bound_s);
  EXPECT_EQ(s->anchor_s, 1.3);
}

TEST(Scenarios, TheTestbedFanOutCostsOneCopyAndTheNaiveWayNCopies) {
  auto chain = BuildScenario("testbed", {{"receivers", 4}, {"payload", "small"}});
  auto naive = BuildScenario("testbed", {{"receivers", 4}, {"payload", "small"}, {"relay_fanout", 0}});
  ASSERT_TRUE(chain.ok() && naive.ok());
  auto a = Simulated(*chain), b = Simulated(*naive);
  ASSERT_TRUE(a.ok() && b.ok());
  const double one_copy_s = static_cast<double>(chain->plan.DestinationBytes()) / 4 / (1e9 / 8);
  EXPECT_NEAR(a->makespan_s, one_copy_s, 0.02 * one_copy_s);
  EXPECT_NEAR(b->makespan_s, 4 * one_copy_s, 0.01 * 4 * one_copy_s);
}

// The testbed's node replacement: the replacement's own link is the bound however many holders
// share the load, and each holder sends its share.
TEST(Scenarios, TheTestbedReplacementIsBoundByTheReplacementsLink) {
  for (int holders : {1, 2, 3}) {
    auto s = BuildScenario("testbed", {{"case", "replacement"}, {"holders", holders}, {"payload", "128mib"}});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->plan.sources.size(), static_cast<size_t>(holders));
    ASSERT_EQ(s->plan.destinations.size(), 1u);
    auto r = Simulated(*s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const double link_s = (128ull << 20) / (1e9 / 8);
    EXPECT_NEAR(r->makespan_s, link_s, 0.02 * link_s) << holders << " holders";
    std::set<int> senders;
    for (const PlanStep& step : s->plan.steps) senders.insert(step.from.rank);
    EXPECT_EQ(senders.size(), static_cast<size_t>(holders));
  }
}

// Contiguous runs per destination rank, counted apart from the simulator.
std::vector<uint64_t> RunsPerDestination(const Plan& plan) {
  std::vector<uint64_t> runs(plan.destinations.size(), 0);
  for (const PlanStep& step : plan.steps) {
    EXPECT_TRUE(ForEachStepRun(plan, step, [&](const StepRun&) { ++runs.at(step.to_rank); }).ok());
  }
  return runs;
}

Result<SimResult> WithMessageCost(const Scenario& s, double per_message_s) {
  SimOptions options;
  options.per_message_s = per_message_s;
  return Simulate(s.plan, s.graph, s.endpoints, options);
}

// One flow alone on its path: each message adds exactly its cost; the bytes reported and the bound
// stay the plan's.
TEST(Scenarios, EachMessageOfALoneFlowAddsItsCost) {
  auto s = BuildScenario("testbed", {{"receivers", 1}, {"payload", "small"}, {"chunk_kib", 64}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto bytes_only = WithMessageCost(*s, 0), charged = WithMessageCost(*s, 50e-6);
  ASSERT_TRUE(bytes_only.ok() && charged.ok());
  const uint64_t runs = RunsPerDestination(s->plan).at(0);
  EXPECT_GT(runs, s->plan.steps.size());  // 64 KiB chunks cut the steps' runs
  EXPECT_EQ(charged->stats.messages, runs);
  EXPECT_EQ(bytes_only->stats.messages, 0u);
  EXPECT_NEAR(charged->makespan_s - bytes_only->makespan_s, static_cast<double>(runs) * 50e-6,
              1e-3 * charged->makespan_s);
  EXPECT_DOUBLE_EQ(charged->lower_bound_s, bytes_only->lower_bound_s);
  EXPECT_EQ(charged->destinations.at(0).bytes, bytes_only->destinations.at(0).bytes);
  EXPECT_NEAR(charged->timeline.back().delivered_bytes, static_cast<double>(s->plan.TotalBytes()), 1.0);
}

// The testbed reshard cuts matrices along their last dimension: tens of thousands of small Gets into
// each destination, which a per-message cost charges; the fan-out's few large Gets barely move. The
// scenario charges none unless asked.
TEST(Scenarios, AMessageCostChargesTheReshardsSmallGetsAndHardlyTheFanOut) {
  constexpr double kCost = 36e-6;
  auto reshard = BuildScenario("testbed", {{"case", "reshard"}, {"payload", "small"}});
  auto fanout = BuildScenario("testbed", {{"receivers", 4}, {"payload", "small"}});
  ASSERT_TRUE(reshard.ok() && fanout.ok());
  EXPECT_EQ(reshard->per_message_s, 0);
  auto asked = BuildScenario("testbed", {{"case", "reshard"}, {"payload", "small"}, {"per_message_us", 36}});
  ASSERT_TRUE(asked.ok());
  EXPECT_DOUBLE_EQ(asked->per_message_s, kCost);
  auto r0 = WithMessageCost(*reshard, 0), r1 = WithMessageCost(*reshard, kCost);
  auto f0 = WithMessageCost(*fanout, 0), f1 = WithMessageCost(*fanout, kCost);
  ASSERT_TRUE(r0.ok() && r1.ok() && f0.ok() && f1.ok());
  const std::vector<uint64_t> runs = RunsPerDestination(reshard->plan);
  const uint64_t busiest = *std::max_element(runs.begin(), runs.end());
  EXPECT_GT(busiest, 10'000u);
  // The busiest destination's link carries its messages' cost on top of its bytes.
  const double added = r1->makespan_s - r0->makespan_s;
  EXPECT_GT(added, 0.8 * static_cast<double>(busiest) * kCost);
  EXPECT_LT(added, 1.2 * static_cast<double>(busiest) * kCost);
  EXPECT_DOUBLE_EQ(r1->lower_bound_s, r0->lower_bound_s);
  EXPECT_LT(f1->makespan_s, 1.02 * f0->makespan_s);
}

TEST(Scenarios, EveryHbdPresetRunsTheDenseSync) {
  for (const char* preset : {"dgx-h100", "gb200-nvl72", "tpuv4", "infinitehbd"}) {
    auto s = BuildScenario("dense-50b-sync", {{"topology", preset}, {"gpus", 64}, {"layers", 2}});
    ASSERT_TRUE(s.ok()) << preset << ": " << s.status().ToString();
    auto r = Simulated(*s);
    ASSERT_TRUE(r.ok()) << preset << ": " << r.status().ToString();
    EXPECT_EQ(r->destinations.size(), 64u) << preset;
    EXPECT_GE(r->makespan_s, r->lower_bound_s) << preset;
    EXPECT_LT(r->makespan_s, 1.5 * r->lower_bound_s) << preset;
  }
}

TEST(Scenarios, AReplacementNodeIsFedByEveryOtherReplica) {
  auto s = BuildScenario("node-replacement", {{"gpus", 64}, {"failed_host", 2}, {"layers", 2}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->endpoints.dst_nodes.size(), 8u);
  EXPECT_EQ(s->endpoints.src_nodes.size(), 56u);
  for (int node : s->endpoints.dst_nodes) EXPECT_EQ(s->graph.nodes()[node].name.rfind("node2/", 0), 0u);
  auto r = Simulated(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The new node's NIC links are the bound, and the other replicas share the load.
  EXPECT_LT(r->makespan_s, 1.1 * r->lower_bound_s);
}

TEST(Scenarios, AHostSmallerThanItsTpGroupRefillsItsOwnRanks) {
  // Ring nodes of 4 GPUs, TP 8: host 1 holds ranks 4-7 of replica 0. Replica 0 is no source (its
  // other half lost its partner), the 7 other replicas are; the new node receives 4 ranks' shards,
  // and with Adam state 7 times the bytes.
  auto s = BuildScenario("node-replacement",
                         {{"topology", "infinitehbd"}, {"gpus", 64}, {"failed_host", 1}, {"layers", 2}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->endpoints.dst_nodes.size(), 4u);
  EXPECT_EQ(s->endpoints.src_nodes.size(), 56u);
  for (int node : s->endpoints.src_nodes)
    EXPECT_EQ(std::count(s->endpoints.dst_nodes.begin(), s->endpoints.dst_nodes.end(), node), 0);
  auto with_state = BuildScenario(
      "node-replacement",
      {{"topology", "infinitehbd"}, {"gpus", 64}, {"failed_host", 1}, {"layers", 2}, {"optimizer", 1}});
  ASSERT_TRUE(with_state.ok()) << with_state.status().ToString();
  auto bytes_in = [](const Scenario& sc) {
    uint64_t total = 0;
    for (const auto& step : sc.plan.steps) total += step.bytes;
    return total;
  };
  EXPECT_EQ(bytes_in(*with_state), 7 * bytes_in(*s));
  auto r = Simulated(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->destinations.size(), 4u);
}

TEST(Scenarios, ErrorsNameTheScenarioAndTheParameter) {
  auto s = BuildScenario("kimi-k3");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("unknown scenario 'kimi-k3'"), std::string::npos);
  s = BuildScenario("dense-50b-sync", {{"tp", 3}, {"gpus", 64}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("scenario 'dense-50b-sync': parameter 'gpus'"), std::string::npos)
      << s.status().ToString();
  s = BuildScenario("fanout-16k", {{"topology", "nvl-9000"}, {"gpus", 8}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("nvl-9000"), std::string::npos) << s.status().ToString();
}

// Double parameters are range-checked before they become byte counts: 1e12 GB overflowed uint64_t
// and the scenario reported "2.00 MiB moved".
TEST(Scenarios, AModelTooLargeForAByteCountIsRefused) {
  auto s = BuildScenario("fanout-16k", {{"gpus", 8}, {"model_gb", 1e12}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "scenario 'fanout-16k': parameter 'model_gb' must be at most 1000000 (got 1000000000000.0)");
  s = BuildScenario("fanout-16k", {{"gpus", 8}, {"model_gb", 1e-12}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("parameter 'model_gb' must give every one of the 64 buckets"),
            std::string::npos)
      << s.status().ToString();
}

// Sizes each within range whose layouts would hold too many shards are refused before the topology
// is built, naming the parameter (gpus=1000000 built a 2.3M-node graph and then aborted).
TEST(Scenarios, OversizedLayoutsAreRefusedBeforeBuilding) {
  struct Case {
    const char* scenario;
    nlohmann::json params;
    const char* expected;
  };
  const Case cases[] = {
      {"fanout-16k",
       {{"gpus", 1000000}},
       "parameter 'gpus' = 1000000 makes gpus x buckets = 64000000 shards"},
      {"dense-50b-sync", {{"gpus", 1 << 20}}, "parameter 'gpus' = 1048576 makes gpus x tensors"},
      {"node-replacement", {{"gpus", 1 << 20}}, "parameter 'gpus' = 1048576 makes gpus x tensors"},
      {"kimi-k2-update", {{"dst_replicas", 4096}}, "parameter 'dst_replicas' = 4096 makes"},
  };
  for (const Case& c : cases) {
    auto s = BuildScenario(c.scenario, c.params);
    ASSERT_FALSE(s.ok()) << c.scenario;
    EXPECT_NE(s.status().message().find(c.expected), std::string::npos) << s.status().ToString();
  }
}

}  // namespace
}  // namespace weightport::sim
