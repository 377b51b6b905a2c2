// A source lost mid-version whose shards another source holds (DDP replicas): the steps rooted at it
// are read from the replica, checked against the hashes mirrored from the lost source, and every
// destination receives the version bit-exact. Without a replica, or before its hashes were read,
// the receive fails naming the step and the source.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "engine/testing/plan_rank_test_util.h"
#include "weightport/engine/rank/plan_rank.h"

// A namespace of its own: the unity build compiles this file together with other tests.
namespace weightport::plan_replica_fallback_test {
namespace {

using namespace plan_rank_test;
using std::chrono::milliseconds;

constexpr Endpoint kSrc0{PlanSide::kSource, 0};

// Per source, the root steps destination `dst` receives from it.
std::map<Endpoint, size_t> RootStepsInto(const Plan& plan, int dst) {
  std::map<Endpoint, size_t> out;
  for (const PlanStep& s : plan.steps)
    if (s.to_rank == dst && s.after < 0) ++out[s.from];
  return out;
}

// Overwrites every shard of source `ep` after it published: a chunk read from it now fails its hash.
void Scramble(Group& g, Endpoint ep) {
  PlanRank& r = *g.ranks.at(ep);
  for (size_t i = 0; i < r.num_shards(); ++i)
    for (std::byte& b : r.shard_bytes(i)) b = ~b;
}

TEST(PlanReplicaFallback, ASourceLostWhileReceivingIsReadFromItsReplica) {
  // Two DDP sources, each holding everything, into one destination reading from both.
  Group g(MustPlan(ReplicasOfTp(2, 1), ReplicasOfTp(1, 1), 1));
  const std::map<Endpoint, size_t> roots = RootStepsInto(*g.plan, 0);
  ASSERT_EQ(roots.size(), 2u);
  g.Publish(1);
  // Every Get completes 150 ms after it is issued: the chunks are still on their way when the
  // destination's first chunk Get (issued once both hash areas are mirrored) shows.
  g.faults->set_delay({0, 1.0, kFaultGet}, milliseconds(150));
  std::optional<Result<ReceiveStats>> got;
  std::thread receiver([&] { got = g.ranks.at({PlanSide::kDestination, 0})->Receive(1); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (g.faults->stats().ops <= roots.size() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(1));
  g.faults->KillPeer(kSrc0.ToString());
  g.Remove(kSrc0);
  receiver.join();
  ASSERT_TRUE(got && got->ok()) << (got ? got->status().ToString() : "no result");
  EXPECT_EQ((*got)->refetched_from_replica, roots.at(kSrc0));
  EXPECT_GT((*got)->refetched_replica_bytes, 0u);
  EXPECT_GT(g.faults->stats().killed, 0u);
  ASSERT_TRUE(g.ranks.at({PlanSide::kDestination, 0})->Commit(1).ok());
  g.ExpectLive(1);
}

// Ranks made from the whole plan and from their parts (as a plan session's are) alike.
class PlanReplicaFallbackParts : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(WholeAndParts, PlanReplicaFallbackParts, ::testing::Bool());

TEST_P(PlanReplicaFallbackParts, ASourceDeclaredLostIsReadFromItsReplicaInEveryReceive) {
  Group g(MustPlan(ReplicasOfTp(2, 1), ReplicasOfTp(2, 2), 1), {}, std::nullopt, GetParam());
  size_t from_src0 = 0;
  for (const RankBuffer& b : g.plan->destinations)
    from_src0 += RootStepsInto(*g.plan, b.endpoint.rank)[kSrc0];
  ASSERT_GT(from_src0, 0u);
  for (uint64_t v = 1; v <= 2; ++v) {
    g.Publish(v);
    Scramble(g, kSrc0);  // its hashes are published; what it holds now must not be read
    for (const RankBuffer& b : g.plan->destinations) g.ranks.at(b.endpoint)->PeerLost(kSrc0);
    uint64_t steps = 0;
    for (auto& [rank, result] : g.Receive(v)) {
      ASSERT_TRUE(result.ok()) << "dst rank " << rank << ": " << result.status().ToString();
      steps += result->refetched_from_replica;
    }
    EXPECT_EQ(steps, from_src0);
    for (const RankBuffer& b : g.plan->destinations) ASSERT_TRUE(g.ranks.at(b.endpoint)->Commit(v).ok());
    g.ExpectLive(v);
  }
}

TEST(PlanReplicaFallback, ASourceGoneBeforeItsHashesWereReadFailsNamingIt) {
  Group g(MustPlan(ReplicasOfTp(2, 1), ReplicasOfTp(2, 2), 1));
  g.Update(1);
  g.Publish(2);
  g.Remove(kSrc0);
  int failed = 0;
  for (auto& [rank, result] : g.Receive(2)) {
    if (result.ok()) continue;
    ++failed;
    EXPECT_NE(result.status().message().find("chunk hashes of src rank 0"), std::string::npos)
        << result.status().ToString();
  }
  EXPECT_GT(failed, 0);
  g.ExpectLive(1);
}

TEST(PlanReplicaFallback, ASourceWithNoReplicaFailsNamingTheStepAndTheSource) {
  // FSDP sources: each holds its own flat shard of every tensor.
  Group g(MustPlan(FsdpFlat(Model(), 2), ReplicasOfTp(2, 2), 1));
  g.Update(1);
  g.Publish(2);
  for (const RankBuffer& b : g.plan->destinations) g.ranks.at(b.endpoint)->PeerLost(kSrc0);
  int failed = 0;
  for (auto& [rank, result] : g.Receive(2)) {
    if (RootStepsInto(*g.plan, rank)[kSrc0] == 0) continue;
    ASSERT_FALSE(result.ok()) << "dst rank " << rank;
    ++failed;
    const std::string& why = result.status().message();
    EXPECT_NE(why.find("' step "), std::string::npos) << why;
    EXPECT_NE(why.find("its source src rank 0 is lost and no other source holds its shard"),
              std::string::npos)
        << why;
  }
  EXPECT_GT(failed, 0);
  g.ExpectLive(1);
}

}  // namespace
}  // namespace weightport::plan_replica_fallback_test
