#include "weightport/sim/hbd/tp_placement.h"

#include <gtest/gtest.h>

namespace weightport::sim::hbd {
namespace {

ArchSpec Arch(const char* name, int k = 2) {
  auto a = MakeArch(name, k);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return *a;
}

std::vector<char> Faulty(int nodes, std::initializer_list<int> down) {
  std::vector<char> f(nodes, 0);
  for (int d : down) f[d] = 1;
  return f;
}

TEST(TpPlacement, NoFaultsWasteNothingWhenNodesDivideIntoRings) {
  // 64 nodes of 4 GPUs, TP 32 = rings of 8 nodes: 8 rings, every GPU used.
  auto p = PlaceTp(Arch("infinitehbd"), Faulty(64, {}), 32);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->groups, 8);
  EXPECT_EQ(p->usable_gpus, 256);
  EXPECT_EQ(p->waste_ratio(), 0);
  EXPECT_EQ(p->segments, 1);
  // Whole domains, TP dividing them: NVL-72 (2 domains of 18 trays) at TP 8, TPUv4 (2 cubes of
  // 16 hosts) at TP 16, DGX (4 nodes) at TP 8.
  for (auto [arch, nodes, tp] : {std::tuple{"nvl-72", 36, 8}, {"tpuv4", 32, 16}, {"dgx", 4, 8}}) {
    auto q = PlaceTp(Arch(arch), Faulty(nodes, {}), tp);
    ASSERT_TRUE(q.ok()) << arch;
    EXPECT_EQ(q->waste_ratio(), 0) << arch;
    EXPECT_EQ(q->usable_gpus, q->healthy_gpus) << arch;
  }
}

TEST(TpPlacement, TheRingBridgesRunsShorterThanK) {
  // K = 3: a run of 2 faulty nodes is bridged. 18 nodes, TP 16 (4 nodes per ring): 16 healthy
  // nodes in one segment -> 4 rings, nothing wasted; the ring across the gap is bridged.
  auto p = PlaceTp(Arch("infinitehbd", 3), Faulty(18, {5, 6}), 16, /*keep_groups=*/true);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->segments, 1);
  EXPECT_EQ(p->groups, 4);
  EXPECT_EQ(p->waste_ratio(), 0);
  EXPECT_EQ(p->bridged_groups, 1);
  ASSERT_EQ(p->tp_groups.size(), 4u);
  EXPECT_EQ(p->tp_groups[1].nodes, (std::vector<int>{4, 7, 8, 9}));
  EXPECT_TRUE(p->tp_groups[1].bridged);
}

TEST(TpPlacement, TheRingSplitsAtRunsOfKOrMore) {
  // K = 2 and the same two adjacent faults: the ring is cut there (no wrap-around gap, so one
  // segment of 16 healthy nodes starting after the run) -> still 4 rings of 4.
  auto p = PlaceTp(Arch("infinitehbd", 2), Faulty(18, {5, 6}), 16, true);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->segments, 1);
  EXPECT_EQ(p->groups, 4);
  EXPECT_EQ(p->bridged_groups, 0);
  EXPECT_EQ(p->tp_groups[0].nodes.front(), 7);
  // Two cuts make two segments: 0-4 after 17-18... here nodes 5,6 and 12,13 down in 20 nodes:
  // segments 7..11 (5 nodes) and 14..4 (11 nodes) -> 1 + 2 rings, 1 + 3 nodes left over.
  auto q = PlaceTp(Arch("infinitehbd", 2), Faulty(20, {5, 6, 12, 13}), 16, true);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->segments, 2);
  EXPECT_EQ(q->groups, 3);
  EXPECT_EQ(q->healthy_gpus, 64);
  EXPECT_EQ(q->usable_gpus, 48);
  EXPECT_DOUBLE_EQ(q->waste_ratio(), 0.25);
}

TEST(TpPlacement, WithoutWrapTheEndsAreEnds) {
  ArchSpec line = Arch("infinitehbd", 2);
  line.wrap = false;
  auto p = PlaceTp(line, Faulty(9, {}), 16);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->groups, 2);  // 9 nodes, rings of 4: one node left
  EXPECT_EQ(p->usable_gpus, 32);
}

TEST(TpPlacement, NvlDomainsLoseTheirRemainderAndTheirFaultyNodes) {
  // NVL-72 = 18 trays of 4. TP 16: 72 mod 16 = 8 GPUs wasted per healthy domain.
  auto p = PlaceTp(Arch("nvl-72"), Faulty(36, {}), 16);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->groups, 8);
  EXPECT_EQ(p->usable_gpus, 128);
  EXPECT_NEAR(p->waste_ratio(), 16.0 / 144, 1e-12);
  // One faulty tray in domain 0: 68 healthy GPUs -> 4 groups (64), 4 wasted there.
  auto q = PlaceTp(Arch("nvl-72"), Faulty(36, {3}), 16);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->healthy_gpus, 140);
  EXPECT_EQ(q->usable_gpus, 128);
  // TP larger than the domain: nothing fits.
  EXPECT_EQ(PlaceTp(Arch("nvl-72"), Faulty(36, {}), 128)->usable_gpus, 0);
}

TEST(TpPlacement, ATpuCubeWithAFaultIsLost) {
  // Two cubes of 16 hosts; a fault in cube 1 loses its other 60 chips.
  auto p = PlaceTp(Arch("tpuv4"), Faulty(32, {20}), 16);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->healthy_gpus, 124);
  EXPECT_EQ(p->usable_gpus, 64);
  EXPECT_NEAR(p->waste_ratio(), 60.0 / 124, 1e-12);
}

TEST(TpPlacement, DgxHoldsTpUpToEight) {
  EXPECT_EQ(PlaceTp(Arch("dgx"), Faulty(4, {1}), 8)->usable_gpus, 24);
  EXPECT_EQ(PlaceTp(Arch("dgx"), Faulty(4, {1}), 4)->groups, 6);
  auto p = PlaceTp(Arch("dgx"), Faulty(4, {}), 16);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->usable_gpus, 0);
  EXPECT_EQ(p->waste_ratio(), 1);
}

TEST(TpPlacement, KeptGroupsSayWhereEachRankSits) {
  // NVL-36 (9 trays of 4), tray 1 down, TP 8: the 8 healthy trays hold 4 groups on trays
  // {0, 2}, {3, 4}, {5, 6}, {7, 8}.
  auto p = PlaceTp(Arch("nvl-36"), Faulty(9, {1}), 8, true);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->tp_groups.size(), 4u);
  EXPECT_EQ(p->tp_groups[0].nodes, (std::vector<int>{0, 2}));
  EXPECT_EQ(p->tp_groups[3].nodes, (std::vector<int>{7, 8}));
  // TP 2 inside DGX nodes: 4 groups per node at GPUs 0, 2, 4, 6.
  auto d = PlaceTp(Arch("dgx"), Faulty(2, {0}), 2, true);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->tp_groups.size(), 4u);
  EXPECT_EQ(d->tp_groups[3].nodes, (std::vector<int>{1}));
  EXPECT_EQ(d->tp_groups[3].first_gpu, 6);
  // NVL-72 at TP 6 (not a multiple of a tray): group 1 starts at GPU 2 of tray 1 and ends on tray 2.
  auto n = PlaceTp(Arch("nvl-72"), Faulty(18, {}), 6, true);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->tp_groups[1].nodes, (std::vector<int>{1, 2}));
  EXPECT_EQ(n->tp_groups[1].first_gpu, 2);
}

TEST(TpPlacement, BadInputIsNamed) {
  EXPECT_FALSE(PlaceTp(Arch("infinitehbd"), Faulty(8, {}), 0).ok());
  auto p = PlaceTp(Arch("infinitehbd"), Faulty(8, {}), 6);  // 6 does not tile nodes of 4
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("multiple"), std::string::npos);
  auto a = MakeArch("nvl-99");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("nvl-99"), std::string::npos);
}

}  // namespace
}  // namespace weightport::sim::hbd
