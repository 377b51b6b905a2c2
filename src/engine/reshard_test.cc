#include "weightport/engine/reshard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "weightport/core/placement_builders.h"
#include "weightport/plan/planner.h"
#include "weightport/transport/fake_transport.h"

namespace weightport {
namespace {

using std::chrono::milliseconds;

Secret TestSecret() {
  std::string s(32, 'r');
  return *Secret::FromBytes(std::as_bytes(std::span(s.data(), s.size())), "test secret");
}

std::shared_ptr<const Plan> TestPlan() {
  std::vector<TensorMeta> t = {
      *TensorMeta::Make("model.layers.0.self_attn.q_proj.weight", DType::kBF16, {64, 32}),
      *TensorMeta::Make("model.norm.weight", DType::kBF16, {32})};
  auto src = TensorParallel(t, 2);
  std::vector<MeshAxis> axes = {ReplicaAxis("dp", 2), TensorParallelAxis("tp", 2)};
  auto dst = BuildMesh(t, axes);
  PlanOptions o;
  o.chunk_bytes = 512;
  auto plan = MakePlan(*src, *dst, Topology(), o);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return std::make_shared<const Plan>(std::move(*plan));
}

// One rank in its own thread: joins, then follows the coordinator. `fail_version`: a destination
// reports that version failed instead of receiving it.
struct RankThread {
  Status result;
  std::vector<uint64_t> committed;
  std::thread thread;

  RankThread(std::shared_ptr<const Plan> plan, Endpoint me, std::shared_ptr<FakeFabric> fabric,
             std::string address, uint64_t versions, uint64_t fail_version = 0) {
    thread = std::thread([=, this] { result = Run(plan, me, fabric, address, versions, fail_version); });
  }
  Status Run(std::shared_ptr<const Plan> plan, Endpoint me, std::shared_ptr<FakeFabric> fabric,
             const std::string& address, uint64_t versions, uint64_t fail_version) {
    WP_ASSIGN_OR_RETURN(auto transport, MakeFakeTransport(fabric, me.ToString()));
    ProgressLoop loop(std::move(transport));
    WP_ASSIGN_OR_RETURN(auto rank, PlanRank::Create(plan, me, loop));
    WP_ASSIGN_OR_RETURN(auto member, ReshardMember::Join(address, TestSecret(), *rank, milliseconds(10'000)));
    for (uint64_t v = 1; me.side == PlanSide::kSource && v <= versions; ++v) {
      for (size_t i = 0; i < rank->num_shards(); ++i) {
        auto b = rank->shard_bytes(i);
        std::memset(b.data(), static_cast<int>(v), b.size());
      }
      WP_RETURN_IF_ERROR(rank->Publish(v));
      WP_RETURN_IF_ERROR(member->Ready(v));
      WP_ASSIGN_OR_RETURN(auto e, member->Next(milliseconds(10'000)));
      if (e.kind == ReshardMember::Event::kCommit) committed.push_back(v);
    }
    if (me.side == PlanSide::kDestination) {
      DestinationHooks hooks;
      hooks.before_receive = [fail_version](uint64_t v) {
        return v == fail_version ? Unavailable("disk on fire") : Status::Ok();
      };
      hooks.committed = [&](uint64_t v) -> Status {
        for (size_t s = 0; s < rank->num_shards(); ++s)
          for (std::byte b : rank->shard_bytes(s))
            if (b != std::byte(static_cast<uint8_t>(v))) return DataLoss("wrong byte");
        committed.push_back(v);
        return Status::Ok();
      };
      WP_RETURN_IF_ERROR(FollowAsDestination(*rank, *member, milliseconds(10'000), hooks));
    } else {
      WP_ASSIGN_OR_RETURN(auto bye, member->Next(milliseconds(10'000)));
      if (bye.kind != ReshardMember::Event::kBye) return Internal("expected Bye");
    }
    member.reset();
    rank.reset();
    loop.Stop();
    return Status::Ok();
  }
};

TEST(Reshard, VersionsCommitAcrossMembersAndOneFailureAborts) {
  auto plan = TestPlan();
  auto listener = ControlListener::Listen("127.0.0.1", 0, "coord", TestSecret());
  ASSERT_TRUE(listener.ok());
  ReshardCoordinatorOptions o;
  o.plan_digest = plan->Digest();
  o.ranks = PlanRanks(*plan);
  o.join_timeout = o.update_timeout = milliseconds(10'000);
  ReshardCoordinator coordinator(std::move(*listener), o);
  auto fabric = std::make_shared<FakeFabric>();
  std::vector<std::unique_ptr<RankThread>> ranks;
  for (const Endpoint& ep : o.ranks)
    ranks.push_back(std::make_unique<RankThread>(plan, ep, fabric, coordinator.address(), 3,
                                                 ep == Endpoint{PlanSide::kDestination, 1} ? 2 : 0));
  ASSERT_TRUE(coordinator.WaitForJoins().ok());
  std::vector<ReshardVersionReport> reports;
  for (uint64_t v = 1; v <= 3; ++v) {
    auto r = coordinator.RunVersion(v);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    reports.push_back(*r);
  }
  coordinator.Finish();
  for (auto& r : ranks) r->thread.join();
  for (auto& r : ranks) EXPECT_TRUE(r->result.ok()) << r->result.ToString();
  EXPECT_TRUE(reports[0].committed);
  EXPECT_EQ(reports[0].bytes, plan->TotalBytes());
  EXPECT_FALSE(reports[1].committed);
  EXPECT_NE(reports[1].reason.find("dst rank 1: disk on fire"), std::string::npos) << reports[1].reason;
  EXPECT_TRUE(reports[2].committed);
  for (auto& r : ranks) EXPECT_EQ(r->committed, (std::vector<uint64_t>{1, 3}));
}

TEST(Reshard, RankWithADifferentPlanIsRefusedByName) {
  auto plan = TestPlan();
  auto listener = ControlListener::Listen("127.0.0.1", 0, "coord", TestSecret());
  ASSERT_TRUE(listener.ok());
  ReshardCoordinatorOptions o;
  o.plan_digest = plan->Digest() + 1;  // every rank's plan differs from the coordinator's
  o.ranks = {Endpoint{PlanSide::kDestination, 0}};
  o.join_timeout = milliseconds(2000);
  ReshardCoordinator coordinator(std::move(*listener), o);
  auto fabric = std::make_shared<FakeFabric>();
  Status joined;
  std::thread rank([&] {
    auto t = MakeFakeTransport(fabric, "dst rank 0");
    ProgressLoop loop(std::move(*t));
    auto r = PlanRank::Create(plan, Endpoint{PlanSide::kDestination, 0}, loop);
    joined = r.ok()
                 ? ReshardMember::Join(coordinator.address(), TestSecret(), **r, milliseconds(5000)).status()
                 : r.status();
    r = Status(Cancelled("done"));
    loop.Stop();
  });
  Status s = coordinator.WaitForJoins();
  rank.join();
  EXPECT_EQ(joined.code(), StatusCode::kPermissionDenied) << joined.ToString();
  EXPECT_NE(joined.message().find("dst rank 0 compiled a different plan"), std::string::npos)
      << joined.ToString();
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_NE(s.message().find("refused: dst rank 0"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace weightport
