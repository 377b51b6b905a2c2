#include "weightport/sim/hbd/tor_orchestrator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "weightport/sim/hbd/dp_placement.h"
#include "weightport/sim/hbd/fault_trace.h"

// A namespace of its own: the unity build compiles this file together with other tests.
namespace weightport::sim::hbd::tor_orchestrator_test {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

ArchSpec Ring(int k = 3) { return *MakeArch("infinitehbd", k); }

std::vector<char> Faults(int n, std::initializer_list<int> down) {
  std::vector<char> f(n, 0);
  for (int i : down) f[i] = 1;
  return f;
}

bool HasRing(const TpPlacement& p, const std::vector<int>& nodes) {
  return std::any_of(p.tp_groups.begin(), p.tp_groups.end(),
                     [&](const TpGroup& g) { return g.nodes == nodes; });
}

TEST(TorOrchestrator, KeepsRingsInsideTheirToRWhereTheGreedyCutCrosses) {
  // 16 nodes of 4 GPUs, ToR groups of 32 GPUs (nodes 0-7, 8-15), TP 16 (rings of 4), node 0 down.
  const auto faulty = Faults(16, {0});
  auto greedy = PlaceTp(Ring(), faulty, 16, true);
  ASSERT_TRUE(greedy.ok());
  EXPECT_TRUE(HasRing(*greedy, {5, 6, 7, 8}));  // cut from node 1 on, it straddles nodes 7 | 8
  EXPECT_EQ(CrossingGroups(greedy->tp_groups, 8), 1);
  for (double borrow : {0.0, 4.0, kNever}) {
    auto joint = PlaceRingTorAware(Ring(), faulty, 16, 32, borrow);
    ASSERT_TRUE(joint.ok()) << joint.status().ToString();
    EXPECT_EQ(joint->crossing_rings, 0) << borrow;
    EXPECT_EQ(CrossingGroups(joint->placement.tp_groups, 8), 0);
    EXPECT_EQ(joint->placement.usable_gpus, greedy->usable_gpus) << borrow;  // the same 3 nodes idle
    EXPECT_TRUE(HasRing(joint->placement, {8, 9, 10, 11}));
  }
}

TEST(TorOrchestrator, NeverCrossingGivesNoCrossToRTrafficWhereGreedyHasSome) {
  // 32 nodes, ToR groups of 8 nodes, rings of 4, DP 2: a fault in each of ToR groups 0 and 2.
  const auto faulty = Faults(32, {0, 17});
  auto greedy = PlaceTp(Ring(), faulty, 16, true);
  ASSERT_TRUE(greedy.ok());
  auto greedy_dp = PlaceDp(Ring(), greedy->tp_groups, 16, 2, 32);
  ASSERT_TRUE(greedy_dp.ok());
  EXPECT_GT(greedy_dp->cross_tor_ratio, 0);
  auto never = PlaceRingTorAware(Ring(), faulty, 16, 32, kNever);
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(never->crossing_rings, 0);
  auto dp = PlaceDp(Ring(), never->placement.tp_groups, 16, 2, 32, DpPolicy::kTorAware, kNever);
  ASSERT_TRUE(dp.ok());
  EXPECT_GT(dp->dp_groups, 0);
  EXPECT_EQ(dp->cross_tor_ratio, 0);
  // ToR groups 0 and 2 hold one ring each: with B = infinity they do not pair across ToRs.
  EXPECT_EQ(dp->dp_groups, 2);  // ToR groups 1 and 3: two rings each
  EXPECT_EQ(dp->idle_tp_groups, 2);
  EXPECT_EQ(dp->declined_groups, 1);
}

TEST(TorOrchestrator, BorrowsOnlyWhenItSavesMoreThanTheThreshold) {
  // Nodes 0, 1, 8, 9 down (runs of 2 < K = 3 are bridged): 6 healthy nodes per ToR group. Cut apart,
  // each wastes 2 nodes (16 GPUs in all); a ring of nodes 6, 7, 10, 11 across the boundary wastes none.
  const auto faulty = Faults(16, {0, 1, 8, 9});
  auto borrow = PlaceRingTorAware(Ring(), faulty, 16, 32, 15);
  ASSERT_TRUE(borrow.ok());
  EXPECT_EQ(borrow->placement.usable_gpus, 48);
  EXPECT_EQ(borrow->crossing_rings, 1);
  EXPECT_TRUE(HasRing(borrow->placement, {6, 7, 10, 11}));
  auto keep = PlaceRingTorAware(Ring(), faulty, 16, 32, 16);  // saves 16, not more: stays inside
  ASSERT_TRUE(keep.ok());
  EXPECT_EQ(keep->placement.usable_gpus, 32);
  EXPECT_EQ(keep->crossing_rings, 0);
}

TEST(TorOrchestrator, BorrowsRoundTheWrapWhenThatCrossesLess) {
  // Three ToR groups of 8 nodes; ToR groups 0 and 2 have 6 healthy nodes, ToR group 1 all 8. One
  // ring round the wrap (nodes 22, 23 | 2, 3) wastes nothing with one crossing; carrying forward
  // would cross twice.
  const auto faulty = Faults(24, {0, 1, 16, 17});
  auto p = PlaceRingTorAware(Ring(), faulty, 16, 32, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->placement.usable_gpus, 80);
  EXPECT_EQ(p->boundary_crossings, 1);
  EXPECT_TRUE(HasRing(p->placement, {22, 23, 2, 3}));
  EXPECT_TRUE(p->placement.tp_groups.size() == 5);
}

TEST(TorOrchestrator, AHardBreakIsNeverCrossed) {
  // An open ring (no wrap) of two ToR groups of 8 nodes, 6 healthy nodes in each. Nodes 6, 7, 14,
  // 15 down (runs of 2 < K = 3): the ring of nodes 4, 5 | 8, 9 bridges 6, 7 and saves 2 nodes on
  // either side. Nodes 6, 7, 8 (a run of K that nothing bridges) and 15 down: nothing crosses.
  ArchSpec open = Ring();
  open.wrap = false;
  auto soft = PlaceRingTorAware(open, Faults(16, {6, 7, 14, 15}), 16, 32, 0);
  ASSERT_TRUE(soft.ok());
  EXPECT_EQ(soft->crossing_rings, 1);
  EXPECT_TRUE(HasRing(soft->placement, {4, 5, 8, 9}));
  EXPECT_EQ(soft->placement.usable_gpus, 48);
  auto hard = PlaceRingTorAware(open, Faults(16, {6, 7, 8, 15}), 16, 32, 0);
  ASSERT_TRUE(hard.ok());
  EXPECT_EQ(hard->crossing_rings, 0);
  EXPECT_EQ(hard->placement.usable_gpus, 32);  // 6 healthy nodes on each side: 1 ring each
  auto greedy = PlaceTp(open, Faults(16, {6, 7, 8, 15}), 16, true);
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(hard->placement.usable_gpus, greedy->usable_gpus);
}

TEST(TorOrchestrator, MonotoneInTheThresholdAndAsLeanAsTheGreedyCutAtZero) {
  // Random faults on 1,152 nodes, ToR groups of 576 GPUs (144 nodes), TP 32 and 64, K = 2 and 3.
  const std::vector<double> sweep = {0, 4, 8, 12, 16, 24, 32, 48, 64, 128, kNever};
  for (int k : {2, 3}) {
    for (int tp : {32, 64}) {
      FaultDraws draws(1152, 0.05, 7);
      for (int s = 0; s < 10; ++s) {
        const auto faulty = draws.Next();
        auto greedy = PlaceTp(Ring(k), faulty, tp, true);
        ASSERT_TRUE(greedy.ok());
        int last_usable = greedy->usable_gpus + 1, last_crossings = 1 << 30;
        for (double b : sweep) {
          auto p = PlaceRingTorAware(Ring(k), faulty, tp, 576, b);
          ASSERT_TRUE(p.ok()) << p.status().ToString();
          if (b == 0) {  // the least waste there is, with no more crossings than the greedy cut
            EXPECT_EQ(p->placement.usable_gpus, greedy->usable_gpus);
            int greedy_crossings = 0;
            for (const TpGroup& g : greedy->tp_groups)
              for (size_t j = 1; j < g.nodes.size(); ++j)
                greedy_crossings += g.nodes[j] / 144 != g.nodes[j - 1] / 144;
            EXPECT_LE(p->boundary_crossings, greedy_crossings);
          }
          EXPECT_LE(p->placement.usable_gpus, last_usable) << "B " << b;
          EXPECT_LE(p->boundary_crossings, last_crossings) << "B " << b;
          last_usable = p->placement.usable_gpus, last_crossings = p->boundary_crossings;
          if (b == kNever) {
            EXPECT_EQ(p->crossing_rings, 0);
          }
          // Every ring has TP / 4 distinct healthy nodes, no node in two rings.
          std::vector<char> used(faulty.size(), 0);
          for (const TpGroup& g : p->placement.tp_groups) {
            ASSERT_EQ(static_cast<int>(g.nodes.size()), tp / 4);
            for (int node : g.nodes) {
              EXPECT_FALSE(faulty[node]);
              EXPECT_FALSE(used[node]);
              used[node] = 1;
            }
          }
        }
      }
    }
  }
}

TEST(TorOrchestrator, BadArgumentsAreErrors) {
  EXPECT_FALSE(PlaceRingTorAware(*MakeArch("nvl-72"), Faults(18, {}), 16, 576, 0).ok());
  EXPECT_FALSE(PlaceRingTorAware(Ring(), Faults(16, {}), 16, 0, 0).ok());
  EXPECT_FALSE(PlaceRingTorAware(Ring(), Faults(16, {}), 16, 32, -1).ok());
  EXPECT_FALSE(PlaceRingTorAware(Ring(), Faults(16, {}), 18, 32, 0).ok());  // not a multiple of 4
  auto inside = PlaceRingTorAware(Ring(), Faults(16, {3}), 2, 32, 0);       // TP 2 stays inside nodes
  ASSERT_TRUE(inside.ok());
  EXPECT_EQ(inside->placement.groups, 30);
  EXPECT_EQ(inside->crossing_rings, 0);
}

}  // namespace
}  // namespace weightport::sim::hbd::tor_orchestrator_test
