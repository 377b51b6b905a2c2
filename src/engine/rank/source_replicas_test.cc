#include "weightport/engine/rank/source_replicas.h"

#include <gtest/gtest.h>

#include "engine/testing/plan_rank_test_util.h"
#include "weightport/engine/rank/rank_plan.h"

namespace weightport {
namespace {

using namespace plan_rank_test;

// Two sources that each hold the whole model (DDP) and two TP-2 replicas as destinations.
Plan DdpPlan() { return MustPlan(ReplicasOfTp(2, 1), ReplicasOfTp(2, 2), 1); }

TEST(SourceReplicas, GroupsAreTheShardsSeveralSourcesHoldWithTheSameSlice) {
  const Plan plan = DdpPlan();
  const auto groups = SourceReplicaGroups(plan);
  ASSERT_EQ(groups.size(), plan.tensors.size());  // every tensor, whole, on both sources
  for (const SourceReplicaGroup& g : groups) {
    ASSERT_EQ(g.holders.size(), 2u) << g.tensor_name;
    EXPECT_EQ(g.holders[0].first, (Endpoint{PlanSide::kSource, 0}));
    EXPECT_EQ(g.holders[1].first, (Endpoint{PlanSide::kSource, 1}));
    EXPECT_EQ(g.tensor_name, plan.tensors[g.tensor].name);
  }
  EXPECT_EQ(ReplicatedShards(groups, {PlanSide::kSource, 1}).size(), plan.tensors.size());
  // FSDP shards are each held once: nothing to compare.
  EXPECT_TRUE(SourceReplicaGroups(MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(2, 2), 1)).empty());
}

TEST(SourceReplicas, ALostSourceIsCoveredOnlyWhenALiveReplicaHoldsEachOfItsShards) {
  const Plan plan = DdpPlan();
  const auto groups = SourceReplicaGroups(plan);
  const Endpoint src0{PlanSide::kSource, 0}, src1{PlanSide::kSource, 1};
  const size_t shards = plan.Buffer(src0)->shards.size();
  EXPECT_EQ(MissingReplicas(groups, src0, shards, [&](Endpoint ep) { return ep == src1; }), "");
  const std::string none = MissingReplicas(groups, src0, shards, [](Endpoint) { return false; });
  EXPECT_NE(none.find("has no live replica"), std::string::npos) << none;
  EXPECT_NE(none.find("tensor '"), std::string::npos) << none;
  // A shard outside every group (none here, so claim one more) has no replica at all.
  EXPECT_EQ(MissingReplicas(groups, src0, shards + 1, [](Endpoint) { return true; }),
            "1 of its " + std::to_string(shards + 1) + " shards have no replica");
}

TEST(SourceReplicas, DivergenceNamesTheTensorAndBothRanks) {
  const Plan plan = DdpPlan();
  const auto groups = SourceReplicaGroups(plan);
  auto same = [](Endpoint, uint32_t shard) -> std::optional<uint64_t> { return shard; };
  EXPECT_EQ(DescribeDivergence(groups, same), "");
  const std::string name = groups[1].tensor_name;
  const uint32_t shard = groups[1].holders[1].second;
  auto one_differs = [&](Endpoint ep, uint32_t s) -> std::optional<uint64_t> {
    return ep.rank == 1 && s == shard ? 999 : s;
  };
  EXPECT_EQ(DescribeDivergence(groups, one_differs), "tensor '" + name + "' " + groups[1].slice.ToString() +
                                                         ": src rank 0 and src rank 1 hold different bytes");
  auto all_differ = [](Endpoint ep, uint32_t s) -> std::optional<uint64_t> { return s * 2 + ep.rank; };
  const std::string all = DescribeDivergence(groups, all_differ, 2);
  EXPECT_NE(all.find("; and " + std::to_string(groups.size() - 2) + " more"), std::string::npos) << all;
  // A holder with no digest for the version is left out.
  auto missing = [&](Endpoint ep, uint32_t s) -> std::optional<uint64_t> {
    if (ep.rank == 1) return std::nullopt;
    return s;
  };
  EXPECT_EQ(DescribeDivergence(groups, missing), "");
}

TEST(SourceReplicas, APartCarriesItsReplicatedShardsThroughItsEncoding) {
  auto plan = std::make_shared<const Plan>(DdpPlan());
  RankPlanCutter cutter(plan);
  auto part = cutter.Cut({PlanSide::kSource, 1});
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->replicated_shards, ReplicatedShards(SourceReplicaGroups(*plan), {PlanSide::kSource, 1}));
  auto decoded = DecodeRankPlan(EncodeRankPlan(*part));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->replicated_shards, part->replicated_shards);
  auto dst = cutter.Cut({PlanSide::kDestination, 0});
  ASSERT_TRUE(dst.ok());
  EXPECT_TRUE(dst->replicated_shards.empty());
}

// Replicas that hold the same bytes publish the same digests; one that drifted does not.
TEST(SourceReplicas, PublishDigestsTheReplicatedShards) {
  Group g(DdpPlan());
  g.Publish(1);
  PlanRank& a = *g.ranks.at({PlanSide::kSource, 0});
  PlanRank& b = *g.ranks.at({PlanSide::kSource, 1});
  ASSERT_EQ(a.replica_digests().size(), g.plan->tensors.size());
  EXPECT_EQ(a.replica_digests(), b.replica_digests());
  b.shard_bytes(1)[0] ^= std::byte{1};
  ASSERT_TRUE(b.Publish(2).ok());
  ASSERT_TRUE(a.Publish(2).ok());
  size_t differ = 0;
  for (size_t i = 0; i < a.replica_digests().size(); ++i) {
    EXPECT_EQ(a.replica_digests()[i].first, b.replica_digests()[i].first);
    differ += a.replica_digests()[i].second != b.replica_digests()[i].second;
  }
  EXPECT_EQ(differ, 1u);
  EXPECT_EQ(b.replica_digests()[1].first, 1u);
  EXPECT_NE(a.replica_digests()[1].second, b.replica_digests()[1].second);
}

}  // namespace
}  // namespace weightport
