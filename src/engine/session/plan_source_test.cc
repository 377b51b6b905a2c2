// SourceFollower with the coordinator played by hand over a real control channel and a source rank
// on the fake transport: without rotated keys a verdict is given at once; with them, only once the
// Rekey after it has moved the rank and its new keys are sent.
#include "weightport/engine/session/plan_source.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engine/pubsub/pubsub_test_util.h"
#include "engine/testing/raw_ops_test_util.h"
#include "plan_coordinator_test_util.h"
#include "weightport/control/plan_messages.h"
#include "weightport/control/version_messages.h"
#include "weightport/engine/session/plan_control.h"
#include "weightport/transport/testing/fake_transport.h"

namespace weightport {
namespace {

using namespace engine_test;

// Source rank 0 of a one-to-one plan in a thread of its own: joins `coordinator`, then calls
// SourceFollower::Next `calls` times (fewer when one fails) into `events`.
class Source {
 public:
  Source(const std::string& coordinator, const Secret& secret, bool rotate_keys, int calls) {
    thread_ = std::thread([=, this] {
      auto fabric = std::make_shared<FakeFabric>();
      TransportFactory factory = [fabric](const std::string& name) {
        return MakeFakeTransport(fabric, name);
      };
      auto t = factory("src rank 0");
      if (!t.ok()) return void(events.push_back(t.status()));
      auto loop = std::make_unique<ProgressLoop>(std::move(*t));
      PlanRankOptions options;
      options.rotate_keys = rotate_keys;
      auto rank = PlanRank::Create(OneToOnePlan(), {PlanSide::kSource, 0}, *loop, options);
      if (!rank.ok()) return void(events.push_back(rank.status()));
      auto member = PlanControl::Join(coordinator, secret, **rank, kWait);
      if (!member.ok()) return void(events.push_back(member.status()));
      SourceHooks hooks;
      hooks.rekey = [&](uint64_t) {
        ++moved;
        return MoveToFreshTransport(**rank, loop, factory);
      };
      hooks.held = [&](const PlanControl::Event&) {
        ++held;
        return Status::Ok();
      };
      SourceFollower follower(**rank, **member, rotate_keys, hooks);
      for (int i = 0; i < calls; ++i) {
        events.push_back(follower.Next(kWait));
        given = events.size();
        if (!events.back().ok()) break;
      }
      member->reset();
      rank->reset();
      loop->Stop();
    });
  }
  ~Source() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

  std::vector<Result<PlanControl::Event>> events;  // read after Join
  std::atomic<size_t> given{0};                    // events returned so far
  std::atomic<int> held{0}, moved{0};

 private:
  std::thread thread_;
};

TEST(SourceFollower, WithoutRotatedKeysAVerdictIsGivenAtOnce) {
  const Secret secret = MakeSecret('s');
  HandCoordinator coordinator(secret);
  Source source(coordinator.address(), secret, false, 3);
  ASSERT_TRUE(coordinator.Accept().ok());
  ASSERT_TRUE(coordinator.Send(PlanPeersMsg{}).ok());  // the join's table: a source reads from no one
  ASSERT_TRUE(coordinator.Send(CommitMsg{1}).ok());
  ASSERT_TRUE(coordinator.Send(AbortMsg{2, "dst rank 0 failed"}).ok());
  ASSERT_TRUE(coordinator.Bye().ok());
  source.Join();
  ASSERT_EQ(source.events.size(), 3u);
  for (const auto& e : source.events) ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(source.events[0]->kind, PlanControl::Event::kCommit);
  EXPECT_EQ(source.events[0]->version, 1u);
  EXPECT_EQ(source.events[1]->kind, PlanControl::Event::kAbort);
  EXPECT_EQ(source.events[1]->version, 2u);
  EXPECT_EQ(source.events[1]->reason, "dst rank 0 failed");
  EXPECT_EQ(source.events[2]->kind, PlanControl::Event::kBye);
  EXPECT_EQ(source.held.load(), 0);
  EXPECT_EQ(source.moved.load(), 0);
}

TEST(SourceFollower, WithRotatedKeysAVerdictWaitsForTheRekeyAfterIt) {
  const Secret secret = MakeSecret('s');
  HandCoordinator coordinator(secret);
  Source source(coordinator.address(), secret, true, 2);
  ASSERT_TRUE(coordinator.Accept().ok());
  ASSERT_TRUE(coordinator.Send(PlanPeersMsg{}).ok());
  ASSERT_TRUE(coordinator.Send(CommitMsg{1}).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(source.given.load(), 0u) << "the verdict came before the Rekey after it";
  ASSERT_TRUE(coordinator.Send(RekeyMsg{1}).ok());
  auto keys = coordinator.Expect(MessageType::kPlanJoin);  // the rank's new address and key
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ASSERT_TRUE(coordinator.Send(PlanPeersMsg{}).ok());  // the new table
  ASSERT_TRUE(coordinator.Bye().ok());
  source.Join();
  ASSERT_EQ(source.events.size(), 2u);
  ASSERT_TRUE(source.events[0].ok()) << source.events[0].status().ToString();
  EXPECT_EQ(source.events[0]->kind, PlanControl::Event::kCommit);
  EXPECT_EQ(source.events[0]->version, 1u);
  ASSERT_TRUE(source.events[1].ok()) << source.events[1].status().ToString();
  EXPECT_EQ(source.events[1]->kind, PlanControl::Event::kBye);
  EXPECT_EQ(source.held.load(), 1);
  EXPECT_EQ(source.moved.load(), 1);
}

}  // namespace
}  // namespace weightport
