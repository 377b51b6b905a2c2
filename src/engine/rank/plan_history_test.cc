// Kept versions and Restore (PlanRankOptions::keep_versions): a rollback is a local copy back into
// the staging copy, checked, then the usual Commit; delta after it works from the restored version.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/testing/plan_rank_test_util.h"
#include "weightport/engine/rank/plan_rank.h"

namespace weightport {
namespace {

using namespace plan_rank_test;

PlanRankOptions Keeping(size_t k) {
  PlanRankOptions o;
  o.keep_versions = k;
  return o;
}

// Every destination restores `v` and commits it.
void RollBack(Group& g, uint64_t v) {
  for (const RankBuffer& b : g.plan->destinations) {
    auto restored = g.ranks.at(b.endpoint)->Restore(v);
    ASSERT_TRUE(restored.ok()) << b.endpoint.ToString() << ": " << restored.status().ToString();
    EXPECT_EQ(restored->restored_bytes, g.ranks.at(b.endpoint)->kept_bytes());
    ASSERT_TRUE(g.ranks.at(b.endpoint)->Commit(v).ok());
  }
}

TEST(PlanHistory, RollbackRestoresAKeptVersionAndDeltaGoesOnFromIt) {
  for (bool convert : {false, true}) {
    SCOPED_TRACE(convert ? "bf16 -> f32 at the receivers (landing areas kept too)" : "no conversion");
    std::vector<TransformRule> rules;
    if (convert) rules.push_back({"*", DType::kF32});
    Group g(MustPlan(FsdpFlat(Model(), 4), ReplicasOfTp(3, 2), 1, 1024, rules), Keeping(2));
    // q_proj changes every version; the other tensors only from version 3 on.
    g.content = [&](uint32_t t, uint64_t v) {
      return g.plan->tensors[t].name.find("q_proj") != std::string::npos ? v : v >= 3 ? 3 : 1;
    };
    for (uint64_t v = 1; v <= 4; ++v) g.Update(v);
    g.ExpectLive(4);
    const Endpoint dst0 = g.plan->destinations[0].endpoint;
    EXPECT_EQ(g.ranks.at(dst0)->kept_versions(), (std::vector<uint64_t>{3, 4}));

    // A version no longer kept is refused by name; the live one stays.
    auto gone = g.ranks.at(dst0)->Restore(2);
    ASSERT_FALSE(gone.ok());
    EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
    EXPECT_NE(gone.status().message().find("keeps 3, 4"), std::string::npos) << gone.status().ToString();
    g.ranks.at(dst0)->Abort(2);

    RollBack(g, 3);
    g.ExpectLive(3);
    // Committing the restored version keeps no second copy of it: 3 becomes the newest kept.
    EXPECT_EQ(g.ranks.at(dst0)->kept_versions(), (std::vector<uint64_t>{4, 3}));

    // The next version fetches only what differs from version 3, the one live now.
    uint64_t changing = 0;
    for (const PlanStep& s : g.plan->steps)
      if (g.plan->tensors[s.tensor].name.find("q_proj") != std::string::npos) changing += s.bytes;
    ReceiveStats next = g.Update(5);
    g.ExpectLive(5);
    EXPECT_EQ(next.bytes, changing);
    EXPECT_EQ(next.bytes + next.kept_bytes, g.plan->TotalBytes());
    EXPECT_EQ(g.ranks.at(dst0)->kept_versions(), (std::vector<uint64_t>{3, 5}));
  }
}

// A reader's writes to the live copy after the commit are not what a rollback brings back.
TEST(PlanHistory, AVersionIsKeptAsVerifiedNotAsReadersLeftIt) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 2), 1), Keeping(2));
  g.Update(1);
  for (const RankBuffer& b : g.plan->destinations)
    std::memset(g.ranks.at(b.endpoint)->shard_bytes(0).data(), 0x7f, 16);  // a reader scribbles
  g.Update(2);
  RollBack(g, 1);
  EXPECT_EQ(g.ranks.at(g.plan->destinations[0].endpoint)->kept_versions(), (std::vector<uint64_t>{2, 1}));
  g.ExpectLive(1);
}

TEST(PlanHistory, NothingIsKeptByDefault) {
  Group g(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 2), 1));
  g.Update(1);
  g.Update(2);
  const Endpoint dst0 = g.plan->destinations[0].endpoint;
  EXPECT_TRUE(g.ranks.at(dst0)->kept_versions().empty());
  EXPECT_EQ(g.ranks.at(dst0)->Restore(1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(g.ranks.at(dst0)->live_version(), 2u);
  // A source keeps nothing and restores nothing.
  const Endpoint src0 = g.plan->sources[0].endpoint;
  EXPECT_EQ(g.ranks.at(src0)->kept_bytes(), 0u);
  EXPECT_EQ(g.ranks.at(src0)->Restore(1).status().code(), StatusCode::kFailedPrecondition);
}

TEST(PlanHistory, KeepingVersionsWithShardsOnADeviceIsRefused) {
  PlanRankOptions o = Keeping(1);
  o.device = HostStandInMemory();
  auto plan = std::make_shared<const Plan>(MustPlan(TensorParallel(Model(), 2), ReplicasOfTp(1, 2), 1));
  auto t = MakeFakeTransport(std::make_shared<FakeFabric>(), "dst");
  ASSERT_TRUE(t.ok());
  ProgressLoop loop(std::move(*t));
  auto rank = PlanRank::Create(plan, plan->destinations[0].endpoint, loop, o);
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(rank.status().message().find("keep_versions"), std::string::npos);
  loop.Stop();
}

}  // namespace
}  // namespace weightport
