#include "weightport/engine/session/reshard_coordinator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <thread>

#include "weightport/control/plan_messages.h"
#include "weightport/core/placement_builders.h"
#include "weightport/engine/session/reshard_destination.h"
#include "weightport/engine/session/reshard_member.h"
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
// reports that version failed instead of receiving it. `vanish`: a destination that takes version
// 1, then drops its control connection and stops receiving while its memory stays readable (a
// hung process): the ranks relaying from it see a counter that never moves.
struct RankThread {
  Status result;
  std::vector<uint64_t> committed;
  std::thread thread;

  RankThread(std::shared_ptr<const Plan> plan, Endpoint me, std::shared_ptr<FakeFabric> fabric,
             std::string address, uint64_t versions, uint64_t fail_version = 0, bool vanish = false) {
    thread =
        std::thread([=, this] { result = Run(plan, me, fabric, address, versions, fail_version, vanish); });
  }
  Status Run(std::shared_ptr<const Plan> plan, Endpoint me, std::shared_ptr<FakeFabric> fabric,
             const std::string& address, uint64_t versions, uint64_t fail_version, bool vanish) {
    WP_ASSIGN_OR_RETURN(auto transport, MakeFakeTransport(fabric, me.ToString()));
    ProgressLoop loop(std::move(transport));
    WP_ASSIGN_OR_RETURN(auto rank, PlanRank::Create(plan, me, loop));
    WP_ASSIGN_OR_RETURN(auto member, ReshardMember::Join(address, TestSecret(), *rank, milliseconds(10'000)));
    if (vanish) {
      WP_ASSIGN_OR_RETURN(auto begin, member->Next(milliseconds(10'000)));
      WP_ASSIGN_OR_RETURN(auto stats, rank->Receive(begin.version));
      WP_RETURN_IF_ERROR(member->Verified(stats));
      WP_ASSIGN_OR_RETURN(auto commit, member->Next(milliseconds(10'000)));
      WP_RETURN_IF_ERROR(rank->Commit(commit.version));
      committed.push_back(commit.version);
      WP_RETURN_IF_ERROR(member->Committed(commit.version));
      member.reset();  // the control connection drops; the arena stays mapped until the test ends
      std::this_thread::sleep_for(milliseconds(1500));
      rank.reset();
      loop.Stop();
      return Status::Ok();
    }
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

struct QuorumRun {
  std::vector<ReshardVersionReport> reports;
  std::map<Endpoint, std::vector<uint64_t>> committed;
};

// Three versions under a quorum of `quorum` (0: all or nothing), with `failing` failing version 2
// and `vanishing` gone after version 1.
QuorumRun RunThreeVersions(size_t quorum, Endpoint failing, Endpoint vanishing) {
  auto plan = TestPlan();
  auto listener = ControlListener::Listen("127.0.0.1", 0, "coord", TestSecret());
  EXPECT_TRUE(listener.ok());
  ReshardCoordinatorOptions o;
  o.plan_digest = plan->Digest();
  o.ranks = PlanRanks(*plan);
  o.join_timeout = o.update_timeout = milliseconds(10'000);
  o.quorum = quorum;
  ReshardCoordinator coordinator(std::move(*listener), o);
  auto fabric = std::make_shared<FakeFabric>();
  std::map<Endpoint, std::unique_ptr<RankThread>> ranks;
  for (const Endpoint& ep : o.ranks)
    ranks[ep] = std::make_unique<RankThread>(plan, ep, fabric, coordinator.address(), 3,
                                             ep == failing ? 2 : 0, ep == vanishing);
  QuorumRun out;
  EXPECT_TRUE(coordinator.WaitForJoins().ok());
  for (uint64_t v = 1; v <= 3; ++v) {
    auto r = coordinator.RunVersion(v);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) out.reports.push_back(*r);
  }
  coordinator.Finish();
  for (auto& [ep, r] : ranks) r->thread.join();
  for (auto& [ep, r] : ranks) {
    EXPECT_TRUE(r->result.ok()) << ep.ToString() << ": " << r->result.ToString();
    out.committed[ep] = r->committed;
  }
  return out;
}

TEST(Reshard, VersionsCommitAcrossMembersAndOneFailureAborts) {
  QuorumRun run = RunThreeVersions(0, Endpoint{PlanSide::kDestination, 1}, Endpoint{PlanSide::kSource, 99});
  ASSERT_EQ(run.reports.size(), 3u);
  EXPECT_TRUE(run.reports[0].committed);
  EXPECT_EQ(run.reports[0].bytes, TestPlan()->TotalBytes());
  EXPECT_FALSE(run.reports[1].committed);
  EXPECT_NE(run.reports[1].reason.find("dst rank 1: disk on fire"), std::string::npos)
      << run.reports[1].reason;
  EXPECT_TRUE(run.reports[2].committed);
  for (const auto& [ep, versions] : run.committed)
    EXPECT_EQ(versions, (std::vector<uint64_t>{1, 3})) << ep.ToString();
}

// Under a quorum a failing destination is dropped from its version, named, and keeps its old
// version; the others commit every version.
TEST(Reshard, QuorumDropsAFailingDestination) {
  const Endpoint failing{PlanSide::kDestination, 1};
  QuorumRun run = RunThreeVersions(3, failing, Endpoint{PlanSide::kSource, 99});
  ASSERT_EQ(run.reports.size(), 3u);
  for (const auto& r : run.reports) EXPECT_TRUE(r.committed) << r.reason;
  ASSERT_EQ(run.reports[1].dropped.size(), 1u);
  EXPECT_NE(run.reports[1].dropped[0].find("dst rank 1: disk on fire"), std::string::npos);
  const std::vector<uint64_t> all{1, 2, 3}, without_2{1, 3};
  for (const auto& [ep, versions] : run.committed)
    EXPECT_EQ(versions, ep == failing ? without_2 : all) << ep.ToString();
  // One more failure than the quorum allows aborts the version for everyone.
  QuorumRun strict = RunThreeVersions(4, failing, Endpoint{PlanSide::kSource, 99});
  ASSERT_EQ(strict.reports.size(), 3u);
  EXPECT_FALSE(strict.reports[1].committed);
  EXPECT_NE(strict.reports[1].reason.find("the quorum is 4"), std::string::npos) << strict.reports[1].reason;
}

// A relay whose control connection drops after version 1 and that never receives again: the
// coordinator tells the others, the ranks it relayed to read the sources, and versions 2 and 3
// commit to everyone else with the lost relay named as dropped.
TEST(Reshard, LostRelayIsRoutedAroundUnderAQuorum) {
  auto plan = TestPlan();
  int relay = -1;
  for (const PlanStep& s : plan->steps)
    if (s.from.side == PlanSide::kDestination) relay = s.from.rank;
  ASSERT_GE(relay, 0);
  const Endpoint lost{PlanSide::kDestination, relay};
  QuorumRun run = RunThreeVersions(3, Endpoint{PlanSide::kSource, 99}, lost);
  ASSERT_EQ(run.reports.size(), 3u);
  for (const auto& r : run.reports) EXPECT_TRUE(r.committed) << r.reason;
  for (uint64_t v : {1, 2}) {
    ASSERT_EQ(run.reports[v].dropped.size(), 1u) << "version " << v + 1;
    EXPECT_NE(run.reports[v].dropped[0].find(lost.ToString()), std::string::npos)
        << run.reports[v].dropped[0];
  }
  const std::vector<uint64_t> all{1, 2, 3}, first{1};
  for (const auto& [ep, versions] : run.committed)
    EXPECT_EQ(versions, ep == lost ? first : all) << ep.ToString();
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

// A rank that authenticates and then says nothing must not hold up the PlanJoin of the next one.
TEST(Reshard, AMuteConnectionDoesNotHoldUpTheJoinsBehindIt) {
  auto plan = TestPlan();
  auto listener = ControlListener::Listen("127.0.0.1", 0, "coord", TestSecret());
  ASSERT_TRUE(listener.ok());
  ReshardCoordinatorOptions o;
  o.plan_digest = plan->Digest();
  o.ranks = {Endpoint{PlanSide::kDestination, 0}};
  o.join_timeout = milliseconds(10'000);
  ReshardCoordinator coordinator(std::move(*listener), o);
  std::unique_ptr<ControlChannel> mute, rank;
  std::thread peers([&] {
    auto m = ControlChannel::Connect(coordinator.address(), "mute", PeerRole::kObserver, TestSecret(),
                                     milliseconds(5000));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mute = std::move(*m);
    std::this_thread::sleep_for(milliseconds(200));  // the coordinator waits for its PlanJoin
    auto r = ControlChannel::Connect(coordinator.address(), "dst-0", PeerRole::kObserver, TestSecret(),
                                     milliseconds(5000));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    PlanJoinMsg join;
    join.side = 1;
    join.rank = 0;
    join.plan_digest = plan->Digest();
    ASSERT_TRUE((*r)->Send(join).ok());
    rank = std::move(*r);
  });
  const auto start = std::chrono::steady_clock::now();
  Status s = coordinator.WaitForJoins();
  const auto took = std::chrono::steady_clock::now() - start;
  peers.join();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(took, milliseconds(2000)) << std::chrono::duration_cast<milliseconds>(took).count() << " ms";
}

}  // namespace
}  // namespace weightport
