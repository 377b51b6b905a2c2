// A source started in place of a lost one refills its shards from the sources that hold the same
// slices (node replacement): every byte, its share from each holder, the digests its peers publish.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "engine/testing/plan_rank_test_util.h"
#include "weightport/engine/rank/plan_rank.h"
#include "weightport/engine/rank/source_replicas.h"

namespace weightport {
namespace {

using namespace plan_rank_test;

constexpr Endpoint kSrc0{PlanSide::kSource, 0};

// A new process for `ep`: its own transport on the group's fabric, an empty arena.
struct Replacement {
  std::unique_ptr<ProgressLoop> loop;
  std::unique_ptr<PlanRank> rank;
  Replacement(Group& g, Endpoint ep) {
    auto t = MakeFakeTransport(g.fabric, ep.ToString() + " again");
    EXPECT_TRUE(t.ok());
    loop = std::make_unique<ProgressLoop>(std::move(*t));
    auto r = PlanRank::Create(g.plan, ep, *loop);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    rank = std::move(*r);
  }
  ~Replacement() {
    rank.reset();
    loop->Stop();
  }
};

std::map<Endpoint, PlanPeer> Without(std::map<Endpoint, PlanPeer> table, Endpoint ep) {
  table.erase(ep);
  return table;
}

TEST(PlanRefill, AReplacementSourceRefillsEveryShardFromItsPeersInTurn) {
  // Three DDP sources, each holding the whole model.
  Group g(MustPlan(ReplicasOfTp(3, 1), ReplicasOfTp(1, 1), 0));
  g.Publish(1);
  Replacement fresh(g, kSrc0);
  auto got = fresh.rank->Refill(Without(g.table, kSrc0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const PlanRank& old = *g.ranks.at(kSrc0);
  uint64_t total = 0;
  for (size_t i = 0; i < fresh.rank->num_shards(); ++i) {
    auto want = g.ranks.at({PlanSide::kSource, 1})->shard_bytes(i);
    auto have = fresh.rank->shard_bytes(i);
    ASSERT_EQ(have.size(), want.size());
    EXPECT_EQ(std::memcmp(have.data(), want.data(), have.size()), 0) << "shard " << i;
    total += have.size();
  }
  EXPECT_EQ(got->bytes, total);
  EXPECT_EQ(got->shards, fresh.rank->num_shards());
  EXPECT_EQ(got->not_refilled, 0u);
  // Both holders carried a share, within one 4 MiB block of half each (the blocks alternate).
  ASSERT_EQ(got->bytes_from.size(), 2u);
  for (const auto& [from, bytes] : got->bytes_from) {
    const uint64_t half = total / 2;
    EXPECT_LE(bytes > half ? bytes - half : half - bytes, kReplicaBlockBytes) << from.ToString();
  }
  // Its digests are the ones the lost source published for the same bytes.
  EXPECT_EQ(got->digests, old.replica_digests());
  EXPECT_FALSE(got->digests.empty());
}

TEST(PlanRefill, ASourceWithNoHolderInTheTableIsNamed) {
  Group g(MustPlan(ReplicasOfTp(2, 1), ReplicasOfTp(1, 1), 0));
  g.Publish(1);
  Replacement fresh(g, kSrc0);
  auto table = Without(Without(g.table, kSrc0), {PlanSide::kSource, 1});
  auto got = fresh.rank->Refill(table);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("holds tensor '"), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find("nothing to refill it from"), std::string::npos)
      << got.status().message();
  // A destination has nothing to refill.
  auto dst = g.ranks.at({PlanSide::kDestination, 0})->Refill(g.table);
  EXPECT_EQ(dst.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace weightport
