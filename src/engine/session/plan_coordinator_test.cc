#include "weightport/engine/session/plan_coordinator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "weightport/control/plan_messages.h"
#include "weightport/core/placement_builders.h"
#include "weightport/engine/session/plan_control.h"
#include "weightport/engine/session/plan_destination.h"
#include "weightport/plan/planner.h"
#include "weightport/transport/testing/fake_transport.h"

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

// The options the tests here start from: every rank of `plan`, 10 s bounds.
PlanCoordinatorOptions OptionsFor(const Plan& plan) {
  PlanCoordinatorOptions o;
  o.plan_digest = plan.Digest();
  o.ranks = PlanRanks(plan);
  o.join_timeout = o.update_timeout = milliseconds(10'000);
  return o;
}

// A coordinator for `o` on a fresh loopback listener.
std::unique_ptr<PlanCoordinator> CoordinatorFor(PlanCoordinatorOptions o) {
  auto listener = ControlListener::Listen("127.0.0.1", 0, "coord", TestSecret());
  EXPECT_TRUE(listener.ok()) << listener.status().ToString();
  return std::make_unique<PlanCoordinator>(std::move(*listener), std::move(o));
}

// One rank in its own thread: joins, then follows the coordinator. `fail_version`: a destination
// reports that version failed instead of receiving it. `vanish`: a destination that takes version
// 1, then drops its control connection and stops receiving while its memory stays readable (a
// hung process): the ranks relaying from it see a counter that never moves.
// `incarnation`: a rank started again (its transport's name differs from the first's).
// `gone_after_verify`: a destination that receives version 1, reports it verified and drops its
// control connection at once, before any verdict. `delay`: a destination waits this long before it
// receives each version.
struct RankThread {
  Status result;
  std::vector<uint64_t> committed;
  std::vector<ReceiveStats> received;  // a destination's, of the versions it received
  std::thread thread;

  RankThread(std::shared_ptr<const Plan> plan, Endpoint me, std::shared_ptr<FakeFabric> fabric,
             std::string address, uint64_t versions, uint64_t fail_version = 0, bool vanish = false,
             int incarnation = 0, bool gone_after_verify = false, milliseconds delay = milliseconds(0)) {
    thread = std::thread([=, this] {
      result = Run(plan, me, fabric, address, versions, fail_version, vanish, incarnation, gone_after_verify,
                   delay);
    });
  }
  Status Run(std::shared_ptr<const Plan> plan, Endpoint me, std::shared_ptr<FakeFabric> fabric,
             const std::string& address, uint64_t versions, uint64_t fail_version, bool vanish,
             int incarnation, bool gone_after_verify, milliseconds delay) {
    WP_ASSIGN_OR_RETURN(auto transport,
                        MakeFakeTransport(fabric, me.ToString() + "#" + std::to_string(incarnation)));
    ProgressLoop loop(std::move(transport));
    WP_ASSIGN_OR_RETURN(auto rank, PlanRank::Create(plan, me, loop));
    WP_ASSIGN_OR_RETURN(auto member, PlanControl::Join(address, TestSecret(), *rank, milliseconds(10'000)));
    if (gone_after_verify) {
      WP_ASSIGN_OR_RETURN(auto begin, member->Next(milliseconds(10'000)));
      WP_ASSIGN_OR_RETURN(auto stats, rank->Receive(begin.version));
      WP_RETURN_IF_ERROR(member->Verified(stats));
      member.reset();
      std::this_thread::sleep_for(milliseconds(2000));  // those relaying from it read it meanwhile
      rank.reset();
      loop.Stop();
      return Status::Ok();
    }
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
      if (e.kind == PlanControl::Event::kCommit) committed.push_back(v);
    }
    if (me.side == PlanSide::kDestination) {
      DestinationHooks hooks;
      hooks.before_receive = [fail_version, delay](uint64_t v) {
        std::this_thread::sleep_for(delay);
        return v == fail_version ? Unavailable("disk on fire") : Status::Ok();
      };
      hooks.received = [&](uint64_t, const Result<ReceiveStats>& r) {
        if (r.ok()) received.push_back(*r);
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
      if (bye.kind != PlanControl::Event::kBye) return Internal("expected Bye");
    }
    member.reset();
    rank.reset();
    loop.Stop();
    return Status::Ok();
  }
};

struct QuorumRun {
  std::vector<PlanVersionReport> reports;
  std::map<Endpoint, std::vector<uint64_t>> committed;
};

// Three versions under a quorum of `quorum` (0: all or nothing), with `failing` failing version 2
// and `vanishing` gone after version 1.
QuorumRun RunThreeVersions(size_t quorum, Endpoint failing, Endpoint vanishing) {
  auto plan = TestPlan();
  PlanCoordinatorOptions o = OptionsFor(*plan);
  o.quorum = quorum;
  auto owned = CoordinatorFor(o);
  PlanCoordinator& coordinator = *owned;
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

TEST(PlanCoordinator, VersionsCommitAcrossMembersAndOneFailureAborts) {
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
TEST(PlanCoordinator, QuorumDropsAFailingDestination) {
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
TEST(PlanCoordinator, LostRelayIsRoutedAroundUnderAQuorum) {
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

TEST(PlanCoordinator, RankWithADifferentPlanIsRefusedByName) {
  auto plan = TestPlan();
  auto listener = ControlListener::Listen("127.0.0.1", 0, "coord", TestSecret());
  ASSERT_TRUE(listener.ok());
  PlanCoordinatorOptions o;
  o.plan_digest = plan->Digest() + 1;  // every rank's plan differs from the coordinator's
  o.ranks = {Endpoint{PlanSide::kDestination, 0}};
  o.join_timeout = milliseconds(2000);
  PlanCoordinator coordinator(std::move(*listener), o);
  auto fabric = std::make_shared<FakeFabric>();
  Status joined;
  std::thread rank([&] {
    auto t = MakeFakeTransport(fabric, "dst rank 0");
    ProgressLoop loop(std::move(*t));
    auto r = PlanRank::Create(plan, Endpoint{PlanSide::kDestination, 0}, loop);
    joined = r.ok() ? PlanControl::Join(coordinator.address(), TestSecret(), **r, milliseconds(5000)).status()
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
TEST(PlanCoordinator, AMuteConnectionDoesNotHoldUpTheJoinsBehindIt) {
  auto plan = TestPlan();
  auto listener = ControlListener::Listen("127.0.0.1", 0, "coord", TestSecret());
  ASSERT_TRUE(listener.ok());
  PlanCoordinatorOptions o;
  o.plan_digest = plan->Digest();
  o.ranks = {Endpoint{PlanSide::kDestination, 0}};
  o.join_timeout = milliseconds(10'000);
  PlanCoordinator coordinator(std::move(*listener), o);
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

namespace weightport {
namespace {

// The last destination the plan has read through a relay, and its bytes: all, and from the relay.
struct RelayedDestination {
  Endpoint endpoint;
  uint64_t all_bytes = 0, relayed_bytes = 0;
};
RelayedDestination LastRelayed(const Plan& plan) {
  RelayedDestination d{{PlanSide::kDestination, -1}};
  for (const PlanStep& s : plan.steps)
    if (s.from.side == PlanSide::kDestination) d.endpoint.rank = s.to_rank;
  for (const PlanStep& s : plan.steps) {
    if (s.to_rank != d.endpoint.rank) continue;
    d.all_bytes += s.bytes;
    if (s.from.side == PlanSide::kDestination) d.relayed_bytes += s.bytes;
  }
  return d;
}

// Runs versions first..last, each committed or not, into `reports`.
void RunVersions(PlanCoordinator& coordinator, uint64_t first, uint64_t last,
                 std::vector<PlanVersionReport>& reports) {
  for (uint64_t v = first; v <= last; ++v) {
    auto r = coordinator.RunVersion(v);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    reports.push_back(*r);
  }
}

// A destination read through a relay crashes after version 1 (its connection drops, then its
// arena goes), version 2 commits without it, it starts again and joins the running session
// (rejoin): version 3 reaches it in full, its relayed steps from its relay, not from the sources,
// and every rank verifies versions 3 and 4.
TEST(PlanCoordinator, ACrashedDestinationJoinsAgainAndReadsFromItsRelay) {
  auto plan = TestPlan();
  const auto [back, all_bytes, relayed_bytes] = LastRelayed(*plan);
  ASSERT_GE(back.rank, 0);

  PlanCoordinatorOptions o = OptionsFor(*plan);
  o.quorum = 3;
  o.rejoin = true;
  auto owned = CoordinatorFor(o);
  PlanCoordinator& coordinator = *owned;
  auto fabric = std::make_shared<FakeFabric>();
  std::map<Endpoint, std::unique_ptr<RankThread>> ranks;
  for (const Endpoint& ep : o.ranks)
    ranks[ep] = std::make_unique<RankThread>(plan, ep, fabric, coordinator.address(), 4, 0, ep == back);
  ASSERT_TRUE(coordinator.WaitForJoins().ok());
  std::vector<PlanVersionReport> reports;
  ASSERT_NO_FATAL_FAILURE(RunVersions(coordinator, 1, 2, reports));
  ranks[back]->thread.join();
  ASSERT_TRUE(ranks[back]->result.ok()) << ranks[back]->result.ToString();
  auto again = std::make_unique<RankThread>(plan, back, fabric, coordinator.address(), 4, 0, false, 1);
  ASSERT_TRUE(coordinator.AwaitRejoins({back}, milliseconds(10'000)).ok());
  ASSERT_NO_FATAL_FAILURE(RunVersions(coordinator, 3, 4, reports));
  coordinator.Finish();
  again->thread.join();
  for (auto& [ep, r] : ranks)
    if (ep != back) r->thread.join();

  for (const auto& r : reports) EXPECT_TRUE(r.committed) << r.reason;
  ASSERT_EQ(reports[1].dropped.size(), 1u);
  EXPECT_NE(reports[1].dropped[0].find(back.ToString()), std::string::npos) << reports[1].dropped[0];
  EXPECT_EQ(reports[2].rejoined, std::vector<Endpoint>{back});
  EXPECT_TRUE(reports[2].dropped.empty());
  EXPECT_EQ(reports[2].destinations.size(), 4u);
  ASSERT_TRUE(again->result.ok()) << again->result.ToString();
  EXPECT_EQ(again->committed, (std::vector<uint64_t>{3, 4}));
  ASSERT_FALSE(again->received.empty());
  // Version 3, its first: every byte fetched (nothing live to keep), the relayed steps from a peer.
  const ReceiveStats& first = again->received.front();
  EXPECT_EQ(first.version, 3u);
  EXPECT_EQ(first.bytes, all_bytes);
  EXPECT_EQ(first.peer_bytes, relayed_bytes);
  EXPECT_GT(first.peer_bytes, 0u);
  for (auto& [ep, r] : ranks) {
    if (ep == back) continue;
    EXPECT_TRUE(r->result.ok()) << ep.ToString() << ": " << r->result.ToString();
    EXPECT_EQ(r->committed, (std::vector<uint64_t>{1, 2, 3, 4})) << ep.ToString();
  }
}

// A destination that verified and then lost its connection before the verdict: the version
// commits to the others, and the coordinator does not wait for a swap the lost one cannot report
// (it would log "no Committed from" it once update_timeout ran out).
TEST(PlanCoordinator, ADestinationLostAfterItVerifiedIsNotWaitedForAfterTheCommit) {
  auto plan = TestPlan();
  PlanCoordinatorOptions o = OptionsFor(*plan);
  o.update_timeout = milliseconds(3000);
  std::mutex mu;
  std::vector<std::string> lines;
  o.log = [&](std::string line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(std::move(line));
  };
  // Its memory stays readable after it went (gone_after_verify), so the ranks that relay from it
  // still get their bytes.
  const Endpoint gone = plan->destinations.back().endpoint;
  auto owned = CoordinatorFor(o);
  PlanCoordinator& coordinator = *owned;
  auto fabric = std::make_shared<FakeFabric>();
  std::map<Endpoint, std::unique_ptr<RankThread>> ranks;
  for (const Endpoint& ep : o.ranks) {
    // The others start receiving only once it has verified and gone.
    const milliseconds delay(ep.side == PlanSide::kDestination && ep != gone ? 500 : 0);
    ranks[ep] = std::make_unique<RankThread>(plan, ep, fabric, coordinator.address(), 1, 0, false, 0,
                                             ep == gone, delay);
  }
  ASSERT_TRUE(coordinator.WaitForJoins().ok());
  auto r = coordinator.RunVersion(1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->committed) << r->reason;
  coordinator.Finish();
  for (auto& [ep, t] : ranks) t->thread.join();
  for (auto& [ep, t] : ranks) {
    EXPECT_TRUE(t->result.ok()) << ep.ToString() << ": " << t->result.ToString();
    if (ep.side == PlanSide::kDestination && ep != gone) {
      EXPECT_EQ(t->committed, std::vector<uint64_t>{1});
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  for (const std::string& line : lines) EXPECT_EQ(line.find("no Committed from"), std::string::npos) << line;
}

// A replica the plan reserved a place for joins after two versions ran without it (late): the
// others read around it until then; version 3 reaches it in full, its relayed steps from its relay.
TEST(PlanCoordinator, ALateReplicaJoinsAfterTheFirstVersionsAndReadsFromItsRelay) {
  auto plan = TestPlan();
  const auto [late, all_bytes, relayed_bytes] = LastRelayed(*plan);
  ASSERT_GE(late.rank, 0);

  PlanCoordinatorOptions o = OptionsFor(*plan);
  o.quorum = 2;
  o.rejoin = true;
  o.late = {late};
  auto owned = CoordinatorFor(o);
  PlanCoordinator& coordinator = *owned;
  auto fabric = std::make_shared<FakeFabric>();
  std::map<Endpoint, std::unique_ptr<RankThread>> ranks;
  for (const Endpoint& ep : o.ranks)
    if (ep != late) ranks[ep] = std::make_unique<RankThread>(plan, ep, fabric, coordinator.address(), 4);
  ASSERT_TRUE(coordinator.WaitForJoins().ok());
  std::vector<PlanVersionReport> reports;
  ASSERT_NO_FATAL_FAILURE(RunVersions(coordinator, 1, 2, reports));
  auto newcomer = std::make_unique<RankThread>(plan, late, fabric, coordinator.address(), 4);
  ASSERT_TRUE(coordinator.AwaitRejoins({late}, milliseconds(10'000)).ok());
  ASSERT_NO_FATAL_FAILURE(RunVersions(coordinator, 3, 4, reports));
  coordinator.Finish();
  newcomer->thread.join();
  for (auto& [ep, r] : ranks) r->thread.join();

  for (const auto& r : reports) {
    EXPECT_TRUE(r.committed) << r.reason;
    EXPECT_TRUE(r.dropped.empty()) << r.dropped.front();
    EXPECT_TRUE(r.rejoined.empty());
  }
  EXPECT_EQ(reports[0].destinations.size(), 3u);
  EXPECT_EQ(reports[2].joined, std::vector<Endpoint>{late});
  EXPECT_EQ(reports[2].destinations.size(), 4u);
  ASSERT_TRUE(newcomer->result.ok()) << newcomer->result.ToString();
  EXPECT_EQ(newcomer->committed, (std::vector<uint64_t>{3, 4}));
  ASSERT_FALSE(newcomer->received.empty());
  EXPECT_EQ(newcomer->received.front().version, 3u);
  EXPECT_EQ(newcomer->received.front().bytes, all_bytes);
  EXPECT_EQ(newcomer->received.front().peer_bytes, relayed_bytes);
  EXPECT_GT(relayed_bytes, 0u);
  for (auto& [ep, r] : ranks) {
    EXPECT_TRUE(r->result.ok()) << ep.ToString() << ": " << r->result.ToString();
    if (ep.side == PlanSide::kDestination) {
      EXPECT_EQ(r->committed, (std::vector<uint64_t>{1, 2, 3, 4})) << ep.ToString();
    }
  }
}

// Late ranks need a quorum and rejoin (versions run before they come), and must be destinations.
TEST(PlanCoordinator, LateRanksWithoutAQuorumOrThatAreSourcesAreRefused) {
  auto plan = TestPlan();
  PlanCoordinatorOptions o = OptionsFor(*plan);
  o.rejoin = true;
  o.late = {Endpoint{PlanSide::kDestination, 1}};
  Status no_quorum = CoordinatorFor(o)->WaitForJoins();
  EXPECT_EQ(no_quorum.code(), StatusCode::kInvalidArgument) << no_quorum.ToString();
  EXPECT_NE(no_quorum.message().find("quorum"), std::string::npos) << no_quorum.message();
  o.quorum = 1;
  o.late = {plan->sources[0].endpoint};
  Status source = CoordinatorFor(o)->WaitForJoins();
  EXPECT_EQ(source.code(), StatusCode::kInvalidArgument) << source.ToString();
  EXPECT_NE(source.message().find(plan->sources[0].endpoint.ToString()), std::string::npos);
}

// A join for a rank whose first connection is still up is held (AwaitRejoins times out naming
// it; the version runs without letting it in), and refused when the session ends.
TEST(PlanCoordinator, ARejoinWhileTheFirstConnectionLivesIsRefused) {
  auto plan = TestPlan();
  PlanCoordinatorOptions o = OptionsFor(*plan);
  o.rejoin = true;
  auto owned = CoordinatorFor(o);
  PlanCoordinator& coordinator = *owned;
  auto fabric = std::make_shared<FakeFabric>();
  std::map<Endpoint, std::unique_ptr<RankThread>> ranks;
  for (const Endpoint& ep : o.ranks)
    ranks[ep] = std::make_unique<RankThread>(plan, ep, fabric, coordinator.address(), 1);
  ASSERT_TRUE(coordinator.WaitForJoins().ok());
  const Endpoint twice{PlanSide::kDestination, 0};
  auto second = std::make_unique<RankThread>(plan, twice, fabric, coordinator.address(), 1, 0, false, 1);
  Status waited = coordinator.AwaitRejoins({twice}, milliseconds(300));
  EXPECT_EQ(waited.code(), StatusCode::kTimeout) << waited.ToString();
  EXPECT_NE(waited.message().find(twice.ToString()), std::string::npos) << waited.message();
  auto r = coordinator.RunVersion(1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->committed) << r->reason;
  EXPECT_TRUE(r->rejoined.empty());
  coordinator.Finish();
  second->thread.join();
  EXPECT_EQ(second->result.code(), StatusCode::kPermissionDenied) << second->result.ToString();
  for (auto& [ep, t] : ranks) {
    t->thread.join();
    EXPECT_TRUE(t->result.ok()) << ep.ToString() << ": " << t->result.ToString();
  }
}

}  // namespace
}  // namespace weightport
