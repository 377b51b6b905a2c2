#include "weightport/sim/hbd/ring_orchestrator.h"

#include <gtest/gtest.h>

#include <random>

namespace weightport::sim::hbd {
namespace {

ArchSpec Ring(int k) { return *MakeArch("infinitehbd", k); }

TEST(RingOrchestrator, AFaultRebuildsOnlyTheRingItHits) {
  // 17 nodes, TP 16 (4 nodes per ring), K = 2: rings 0-3, 4-7, 8-11, 12-15; node 16 free.
  auto o = RingOrchestrator::Create(Ring(2), std::vector<char>(17, 0), 16);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_EQ(o->rings().size(), 4u);
  // Node 13 fails: ring 12-15 is torn down; 12, 14, 15 and the free 16 are within reach
  // (13 is bridged, K = 2), so one new ring 12, 14, 15, 16 is built; the others stay.
  o->SetFaulty(13, true);
  EXPECT_EQ(o->rings_torn_down(), 1);
  EXPECT_EQ(o->rings_built(), 1);
  ASSERT_EQ(o->rings().size(), 4u);
  bool found = false;
  for (const TpGroup& r : o->rings()) {
    if (r.nodes == std::vector<int>{12, 14, 15, 16}) found = r.bridged;
    EXPECT_NE(r.nodes, (std::vector<int>{12, 13, 14, 15}));
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(o->waste_ratio(), 0);
  // Node 5 fails: no free node is left, so its ring cannot be rebuilt: 3 healthy nodes wasted.
  o->SetFaulty(5, true);
  EXPECT_EQ(o->rings_built(), 1);
  EXPECT_EQ(o->rings().size(), 3u);
  EXPECT_NEAR(o->waste_ratio(), 12.0 / 60, 1e-12);
  // Node 5 comes back: 4, 5, 6, 7 are free and within reach, one ring again.
  o->SetFaulty(5, false);
  EXPECT_EQ(o->rings_built(), 2);
  EXPECT_EQ(o->rings().size(), 4u);
  EXPECT_EQ(o->waste_ratio(), 0);
}

TEST(RingOrchestrator, FreeNodesOutOfReachStayFree) {
  // K = 1: no bridging. 8 nodes, TP 8 (2 per ring): rings 0-1, 2-3, 4-5, 6-7. Node 2 fails: 3 is
  // left alone (its neighbours 4 and 1 are in rings), so nothing is rebuilt.
  auto o = RingOrchestrator::Create(Ring(1), std::vector<char>(8, 0), 8);
  ASSERT_TRUE(o.ok());
  o->SetFaulty(2, true);
  EXPECT_EQ(o->rings().size(), 3u);
  EXPECT_EQ(o->rings_built(), 0);
  // Node 4 fails too: 3 and 5 are free but 2 apart, beyond K = 1.
  o->SetFaulty(4, true);
  EXPECT_EQ(o->rings().size(), 2u);
  EXPECT_EQ(o->rings_built(), 0);
  // Node 4 returns: 3, 4, 5 form a chain; one ring of 3-4, 5 stays free.
  o->SetFaulty(4, false);
  EXPECT_EQ(o->rings_built(), 1);
  EXPECT_EQ(o->rings().size(), 3u);
}

TEST(RingOrchestrator, ABrokenRingBorrowsThroughTheFewestRingsUpToTheLimit) {
  // 17 nodes, K = 2, TP 16: rings 0-3, 4-7, 8-11, 12-15, node 16 free. Node 5 fails. The free 16
  // is two rings away forward (8-11, 12-15) and one backward (0-3, across the wrap): 0-3 and the
  // broken ring are re-cut with 16 as 16, 0, 1, 2 and 3, 4, 6, 7.
  auto o = RingOrchestrator::Create(Ring(2), std::vector<char>(17, 0), 16);
  ASSERT_TRUE(o.ok());
  o->SetFaulty(5, true);
  EXPECT_EQ(o->rings_built(), 2);
  EXPECT_EQ(o->rings().size(), 4u);
  EXPECT_EQ(o->waste_ratio(), 0);
  // Allowed to rebuild no ring but its own, it gives up: 3 rings, 3 nodes idle.
  auto strict = RingOrchestrator::Create(Ring(2), std::vector<char>(17, 0), 16, /*max_stretch=*/0);
  ASSERT_TRUE(strict.ok());
  strict->SetFaulty(5, true);
  EXPECT_EQ(strict->rings_built(), 0);
  EXPECT_EQ(strict->rings().size(), 3u);
  EXPECT_FALSE(RingOrchestrator::Create(Ring(2), std::vector<char>(17, 0), 16, -1).ok());
}

// Every ring has TP/4 healthy nodes, none in two rings, consecutive members at most K apart; the
// free set is exactly the healthy nodes in no ring.
void ExpectConsistent(const RingOrchestrator& o, const std::vector<char>& faulty, int k, int per_ring) {
  const int n = static_cast<int>(faulty.size());
  std::vector<int> owner(n, -1);
  int healthy = 0;
  for (char f : faulty) healthy += !f;
  for (size_t r = 0; r < o.rings().size(); ++r) {
    const std::vector<int>& nodes = o.rings()[r].nodes;
    ASSERT_EQ(static_cast<int>(nodes.size()), per_ring);
    for (size_t j = 0; j < nodes.size(); ++j) {
      ASSERT_FALSE(faulty[nodes[j]]) << "faulty node " << nodes[j] << " in ring " << r;
      ASSERT_EQ(owner[nodes[j]], -1) << "node " << nodes[j] << " in two rings";
      owner[nodes[j]] = static_cast<int>(r);
      if (j > 0) {
        ASSERT_LE((nodes[j] - nodes[j - 1] + n) % n, k) << "ring " << r << " cannot close";
      }
    }
  }
  EXPECT_EQ(o.healthy_gpus(), healthy * 4);
}

TEST(RingOrchestrator, RandomFaultsKeepEveryRingValid) {
  std::mt19937 rng(11);
  for (int k : {1, 2, 3}) {
    const int n = 97, tp = 16;
    std::vector<char> faulty(n, 0);
    auto o = RingOrchestrator::Create(Ring(k), faulty, tp);
    ASSERT_TRUE(o.ok());
    for (int step = 0; step < 3000; ++step) {
      const int node = static_cast<int>(rng() % n);
      // Keep about 8% down: a down node comes back, an up node fails, biased to that ratio.
      const bool down = faulty[node] ? (rng() % 100 < 8) : (rng() % 100 < 8);
      faulty[node] = faulty[node] ? down : down;
      o->SetFaulty(node, faulty[node]);
      ExpectConsistent(*o, faulty, k, tp / 4);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(RingOrchestrator, ABorrowDoesNotCrossARunOfKFaultyNodes) {
  // 14 nodes, K = 2, TP 16: rings 0-3, 4-7, 8-11; 12 and 13 free. Node 8 fails: its ring borrows
  // 12 (9, 10, 11, 12). Node 7 fails next to it: a run of 2 = K lies forward of ring 4-7, so it
  // must borrow backward, through ring 0-3, from 13 across the wrap: nothing is wasted.
  auto o = RingOrchestrator::Create(Ring(2), std::vector<char>(14, 0), 16);
  ASSERT_TRUE(o.ok());
  o->SetFaulty(8, true);
  EXPECT_EQ(o->rings().size(), 3u);  // 13 healthy nodes: one is left over
  o->SetFaulty(7, true);
  EXPECT_EQ(o->rings().size(), 3u);
  EXPECT_EQ(o->waste_ratio(), 0);
  std::vector<char> faulty(14, 0);
  faulty[7] = faulty[8] = 1;
  ExpectConsistent(*o, faulty, 2, 4);
}

TEST(RingOrchestrator, OnlyForRingsOfWholeNodes) {
  EXPECT_FALSE(RingOrchestrator::Create(*MakeArch("nvl-72"), std::vector<char>(18, 0), 16).ok());
  EXPECT_FALSE(RingOrchestrator::Create(Ring(2), std::vector<char>(18, 0), 4).ok());
  EXPECT_FALSE(RingOrchestrator::Create(Ring(2), std::vector<char>(18, 0), 6).ok());
}

}  // namespace
}  // namespace weightport::sim::hbd
