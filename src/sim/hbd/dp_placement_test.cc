#include "weightport/sim/hbd/dp_placement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace weightport::sim::hbd {
namespace {

ArchSpec Arch(const char* name, int k = 2) {
  auto a = MakeArch(name, k);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return *a;
}

TpGroup Group(std::vector<int> nodes, int first_gpu = 0) {
  return {.nodes = std::move(nodes), .first_gpu = first_gpu};
}

TEST(DpPlacement, ToRGroupsFollowNodesAndWholeDomains) {
  EXPECT_EQ(TorNodes(Arch("infinitehbd"), 256), 64);  // 4-GPU nodes
  EXPECT_EQ(TorNodes(Arch("dgx"), 256), 32);
  EXPECT_EQ(TorNodes(Arch("nvl-72"), 256), 72);    // 256 GPUs ~ 4 racks of 72 (18 trays each)
  EXPECT_EQ(TorNodes(Arch("tpuv4"), 256), 64);     // 4 cubes of 16 hosts
  EXPECT_EQ(TorNodes(Arch("nvl-576"), 256), 144);  // never less than one domain
  EXPECT_EQ(AutoDp(Arch("infinitehbd"), 256, 32), 8);
  EXPECT_EQ(AutoDp(Arch("infinitehbd"), 256, 512), 1);
  EXPECT_EQ(AutoDp(Arch("nvl-36"), 256, 16), 14);  // 7 racks of 2 groups
  EXPECT_EQ(AutoDp(Arch("dgx"), 256, 4), 32);      // one group per node on rails 0-3
  EXPECT_EQ(AutoDp(Arch("dgx"), 256, 16), 1);      // does not fit
}

TEST(DpPlacement, HandCountedCrossToRShares) {
  // Nodes of 4 GPUs, ToR groups of 16 GPUs = 4 nodes, TP 8 = 2 nodes per group, DP 2.
  const ArchSpec ring = Arch("infinitehbd");
  // A and C under ToR 0, B and D under ToR 1, listed A B C D.
  const std::vector<TpGroup> groups = {Group({0, 1}), Group({4, 5}), Group({2, 3}), Group({6, 7})};
  // In order: (A, B) and (C, D), every rank's two peers on different leaves: 2 edges per rank.
  auto in_order = PlaceDp(ring, groups, 8, 2, 16, DpPolicy::kInOrder);
  ASSERT_TRUE(in_order.ok()) << in_order.status().ToString();
  EXPECT_EQ(in_order->dp_groups, 2);
  EXPECT_DOUBLE_EQ(in_order->cross_tor_ratio, 1.0);
  // ToR-aware: (A, C) and (B, D), nothing crosses.
  auto aware = PlaceDp(ring, groups, 8, 2, 16);
  ASSERT_TRUE(aware.ok());
  EXPECT_DOUBLE_EQ(aware->cross_tor_ratio, 0.0);

  // One group straddles ToRs 0 and 1: its ranks 4..7 (node 4) cross, ranks 0..3 do not:
  // 4 ranks x 2 leaves = 8 edges of 1 x 2 x 8 = 16.
  auto straddle = PlaceDp(ring, {Group({3, 4}), Group({1, 2})}, 8, 2, 16);
  ASSERT_TRUE(straddle.ok());
  EXPECT_DOUBLE_EQ(straddle->cross_tor_ratio, 0.5);

  // A group left over is idle, not counted.
  auto idle = PlaceDp(ring, {Group({0, 1}), Group({2, 3}), Group({4, 5})}, 8, 2, 16);
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(idle->dp_groups, 1);
  EXPECT_EQ(idle->idle_tp_groups, 1);
}

TEST(DpPlacement, PeersOnDifferentRailsCrossAndTheAwarePolicyPairsRails) {
  // TP 2 inside 4-GPU nodes: groups at GPU 0 and GPU 2 of nodes 0 and 1 (one ToR group).
  const ArchSpec dgx4 = [] {
    ArchSpec a = *MakeArch("infinitehbd");
    return a;
  }();
  const std::vector<TpGroup> groups = {Group({0}, 0), Group({0}, 2), Group({1}, 0), Group({1}, 2)};
  auto in_order = PlaceDp(dgx4, groups, 2, 2, 64, DpPolicy::kInOrder);
  ASSERT_TRUE(in_order.ok());
  EXPECT_DOUBLE_EQ(in_order->cross_tor_ratio, 1.0);  // rails 0 and 2 are different leaves
  auto aware = PlaceDp(dgx4, groups, 2, 2, 64);
  ASSERT_TRUE(aware.ok());
  EXPECT_DOUBLE_EQ(aware->cross_tor_ratio, 0.0);
}

TEST(DpPlacement, NoFaultsNoCrossToRTrafficOnEveryArchitecture) {
  // 4,608 GPUs, every architecture and TP it can place, the DP size chosen by AutoDp.
  for (const std::string& name : ArchNames()) {
    const ArchSpec a = Arch(name.c_str());
    for (int tp : {2, 4, 8, 16, 32, 64}) {
      auto p = PlaceTp(a, std::vector<char>(4608 / a.gpus_per_node, 0), tp, true);
      if (!p.ok() || p->groups == 0) continue;  // TP the architecture cannot place
      auto dp = PlaceDp(a, p->tp_groups, tp, AutoDp(a, 256, tp), 256);
      ASSERT_TRUE(dp.ok()) << name << " TP " << tp << ": " << dp.status().ToString();
      EXPECT_GT(dp->dp_groups, 0) << name << " TP " << tp;
      EXPECT_EQ(dp->cross_tor_ratio, 0) << name << " TP " << tp;
    }
  }
}

TEST(DpPlacement, ABorrowThresholdDeclinesGroupsThatCrossForTooLittle) {
  // In order, (A, B) and (C, D) each cross on all 8 ranks: 16 edges, 2 crossings per group, saving
  // 16 GPUs each. Formed while 16 > 2 x B.
  const ArchSpec ring = Arch("infinitehbd");
  const std::vector<TpGroup> groups = {Group({0, 1}), Group({4, 5}), Group({2, 3}), Group({6, 7})};
  auto cheap = PlaceDp(ring, groups, 8, 2, 16, DpPolicy::kInOrder, 7.9);
  ASSERT_TRUE(cheap.ok());
  EXPECT_EQ(cheap->dp_groups, 2);
  EXPECT_EQ(cheap->declined_groups, 0);
  EXPECT_DOUBLE_EQ(cheap->cross_tor_ratio, 1.0);
  auto dear = PlaceDp(ring, groups, 8, 2, 16, DpPolicy::kInOrder, 8);
  ASSERT_TRUE(dear.ok());
  EXPECT_EQ(dear->dp_groups, 0);
  EXPECT_EQ(dear->declined_groups, 2);
  EXPECT_EQ(dear->idle_tp_groups, 4);  // declined members are leftovers like the count mod DP
  // Groups under one leaf set are formed whatever the threshold; a mixed one is declined.
  const std::vector<TpGroup> three = {Group({0, 1}), Group({2, 3}), Group({4, 5}), Group({1, 2})};
  auto never = PlaceDp(ring, three, 8, 2, 16, DpPolicy::kTorAware, std::numeric_limits<double>::infinity());
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(never->dp_groups, 1);
  EXPECT_EQ(never->declined_groups, 1);
  EXPECT_EQ(never->idle_tp_groups, 2);
  EXPECT_EQ(never->cross_tor_ratio, 0);
  EXPECT_FALSE(PlaceDp(ring, groups, 8, 2, 16, DpPolicy::kInOrder, -1).ok());
  EXPECT_FALSE(PlaceDp(ring, groups, 8, 2, 16, DpPolicy::kInOrder, std::nan("")).ok());
}

TEST(DpPlacement, BadSizesAreErrors) {
  EXPECT_FALSE(PlaceDp(Arch("dgx"), {}, 8, 0, 256).ok());
  EXPECT_FALSE(PlaceDp(Arch("dgx"), {}, 8, 1, 0).ok());
  // Groups whose ranks do not fit their nodes: too few nodes, a first GPU outside the node.
  const ArchSpec ring = Arch("infinitehbd");
  EXPECT_FALSE(PlaceDp(ring, {Group({0, 1}), Group({2})}, 8, 2, 16).ok());
  EXPECT_FALSE(PlaceDp(ring, {Group({0}, 0), Group({1}, 2)}, 8, 2, 16).ok());
  EXPECT_FALSE(PlaceDp(ring, {Group({0}, 4)}, 1, 1, 16).ok());
}

}  // namespace
}  // namespace weightport::sim::hbd
