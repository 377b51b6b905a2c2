#include "sim/max_min.h"

#include <gtest/gtest.h>

namespace weightport::sim {
namespace {

constexpr double kNo = MaxMinSolver::kNoCap;

std::vector<double> SolveAll(std::vector<double> capacity, const std::vector<std::vector<int>>& paths,
                             std::vector<double> cap = {}) {
  if (cap.empty()) cap.assign(paths.size(), kNo);
  std::vector<int> active;
  for (size_t f = 0; f < paths.size(); ++f) active.push_back(static_cast<int>(f));
  std::vector<double> rate(paths.size(), -1);
  MaxMinSolver(std::move(capacity)).Solve(active, paths, cap, rate);
  return rate;
}

TEST(MaxMin, TwoFlowsSplitOneLinkEvenly) {
  auto r = SolveAll({10}, {{0}, {0}});
  EXPECT_DOUBLE_EQ(r[0], 5);
  EXPECT_DOUBLE_EQ(r[1], 5);
}

TEST(MaxMin, ABottleneckElsewhereLeavesTheRestToTheOthers) {
  // Link 0 (10) carries f0 and f1; link 1 (4) carries f1 and f2. Link 1 fills first at 2 each,
  // then f0 takes what link 0 has left: 10 - 2 = 8.
  auto r = SolveAll({10, 4}, {{0}, {0, 1}, {1}});
  EXPECT_DOUBLE_EQ(r[0], 8);
  EXPECT_DOUBLE_EQ(r[1], 2);
  EXPECT_DOUBLE_EQ(r[2], 2);
}

TEST(MaxMin, ParkingLotGivesEveryoneHalf) {
  // Three unit links in a row; one flow crosses all, one flow uses each link alone.
  auto r = SolveAll({1, 1, 1}, {{0, 1, 2}, {0}, {1}, {2}});
  for (double v : r) EXPECT_DOUBLE_EQ(v, 0.5);
}

TEST(MaxMin, ASlowLinkOnOnePathDoesNotSlowTheFastOne) {
  // f0 on link 0 (1); f1 on links 0 and 1 (10); f2 on link 1: f0 = f1 = 0.5, f2 = 9.5.
  auto r = SolveAll({1, 10}, {{0}, {0, 1}, {1}});
  EXPECT_DOUBLE_EQ(r[0], 0.5);
  EXPECT_DOUBLE_EQ(r[1], 0.5);
  EXPECT_DOUBLE_EQ(r[2], 9.5);
}

TEST(MaxMin, ACappedFlowLeavesItsShareToTheOthers) {
  auto r = SolveAll({10}, {{0}, {0}, {0}}, {1, kNo, kNo});
  EXPECT_DOUBLE_EQ(r[0], 1);
  EXPECT_DOUBLE_EQ(r[1], 4.5);
  EXPECT_DOUBLE_EQ(r[2], 4.5);
}

TEST(MaxMin, OnlyActiveFlowsAreSolvedAndTheRestKeepTheirRate) {
  std::vector<double> rate = {-1, -1, 7};
  std::vector<std::vector<int>> paths = {{0}, {0}, {0}};
  MaxMinSolver solver({6});
  solver.Solve({0, 1}, paths, {kNo, kNo, kNo}, rate);
  EXPECT_DOUBLE_EQ(rate[0], 3);
  EXPECT_DOUBLE_EQ(rate[1], 3);
  EXPECT_DOUBLE_EQ(rate[2], 7);
  // The solver is reusable: a second call starts from full capacity again.
  solver.Solve({0}, paths, {kNo, kNo, kNo}, rate);
  EXPECT_DOUBLE_EQ(rate[0], 6);
}

TEST(MaxMin, CapacityIsNeverExceeded) {
  // Random-ish instance: every link's total stays within its capacity.
  std::vector<double> capacity = {5, 3, 8, 2, 9};
  std::vector<std::vector<int>> paths = {{0, 1}, {1, 2}, {2, 3, 4}, {0, 4}, {3}, {0, 1, 2, 3, 4}, {4}};
  auto r = SolveAll(capacity, paths);
  std::vector<double> used(capacity.size(), 0);
  for (size_t f = 0; f < paths.size(); ++f)
    for (int l : paths[f]) used[l] += r[f];
  for (size_t l = 0; l < capacity.size(); ++l) EXPECT_LE(used[l], capacity[l] + 1e-9) << "link " << l;
  // Max-min: every flow crosses at least one full link (it is bottlenecked somewhere).
  for (size_t f = 0; f < paths.size(); ++f) {
    bool bottlenecked = false;
    for (int l : paths[f]) bottlenecked |= used[l] >= capacity[l] - 1e-9;
    EXPECT_TRUE(bottlenecked) << "flow " << f;
  }
}

TEST(MaxMin, AFollowerRunsNoFasterThanItsLeader) {
  // f0 shares link 0 (2) with f1: 1 each. f2 relays f0 over the free link 1 (10): 1, not 10.
  std::vector<std::vector<int>> paths = {{0}, {0}, {1}};
  std::vector<std::vector<MaxMinSolver::Lead>> leads(3);
  leads[2] = {{0, 1.0}};
  std::vector<double> rate(3, -1);
  MaxMinSolver({2, 10}).Solve({0, 1, 2}, paths, {kNo, kNo, kNo}, rate, leads);
  EXPECT_DOUBLE_EQ(rate[0], 1);
  EXPECT_DOUBLE_EQ(rate[1], 1);
  EXPECT_DOUBLE_EQ(rate[2], 1);
}

TEST(MaxMin, AFollowerOfSeveralLeadersIsFedTheirWeightedSum) {
  // f2 relays half of f0's bytes and all of f1's: 0.5 x 4 + 1 x 1 = 3 on its own link of 10.
  // f3 shares link 1 with f2: a capped follower leaves the rest to it (10 - 3 = 7).
  std::vector<std::vector<int>> paths = {{0}, {2}, {1}, {1}};
  std::vector<std::vector<MaxMinSolver::Lead>> leads(4);
  leads[2] = {{0, 0.5}, {1, 1.0}};
  std::vector<double> rate(4, -1);
  MaxMinSolver({4, 10, 1}).Solve({0, 1, 2, 3}, paths, {kNo, kNo, kNo, kNo}, rate, leads);
  EXPECT_DOUBLE_EQ(rate[0], 4);
  EXPECT_DOUBLE_EQ(rate[1], 1);
  EXPECT_DOUBLE_EQ(rate[2], 3);
  EXPECT_DOUBLE_EQ(rate[3], 7);
}

TEST(MaxMin, AChainOfFollowersRunsAtTheRateOfItsSlowestFeed) {
  // f0 on a link of 1; f1 follows f0, f2 follows f1, each on a fast link of its own.
  std::vector<std::vector<int>> paths = {{0}, {1}, {2}};
  std::vector<std::vector<MaxMinSolver::Lead>> leads(3);
  leads[1] = {{0, 1.0}};
  leads[2] = {{1, 1.0}};
  std::vector<double> rate(3, -1);
  MaxMinSolver({1, 10, 10}).Solve({0, 1, 2}, paths, {kNo, kNo, kNo}, rate, leads);
  for (double r : rate) EXPECT_DOUBLE_EQ(r, 1);
}

}  // namespace
}  // namespace weightport::sim
