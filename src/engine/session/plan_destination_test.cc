// FollowAsDestination and the peer tables that follow a rekey, with the coordinator played by hand
// over a real control channel and ranks on the fake transport. A rekey's table is dialled at the
// next UpdateBegin, not when it comes: the newest table wins, and one naming a peer that is gone
// fails that version, named, while the run goes on.
#include "weightport/engine/session/plan_destination.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

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

TEST(FollowAsDestination, AnUnreachablePeerTableIsRetriedAtTheNextVersionAndAGoodOneReplacesIt) {
  auto fabric = std::make_shared<FakeFabric>();
  auto plan = OneToOnePlan();
  const Secret secret = MakeSecret('d');
  auto src_transport = MakeFakeTransport(fabric, "src rank 0");
  ASSERT_TRUE(src_transport.ok());
  ProgressLoop src_loop(std::move(*src_transport));
  auto source = PlanRank::Create(plan, {PlanSide::kSource, 0}, src_loop);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const PlanPeer good = (*source)->peer_info();
  // An address whose transport is closed: what a peer that already ended leaves behind.
  PlanPeer gone = good;
  {
    auto t = MakeFakeTransport(fabric, "gone");
    ASSERT_TRUE(t.ok());
    gone.address = (*t)->address();
    (*t)->Close();
  }

  HandCoordinator coordinator(secret);
  Status followed = Internal("not run");
  std::thread destination([&] {
    auto t = MakeFakeTransport(fabric, "dst rank 0");
    if (!t.ok()) return void(followed = t.status());
    ProgressLoop loop(std::move(*t));
    auto rank = PlanRank::Create(plan, {PlanSide::kDestination, 0}, loop);
    if (!rank.ok()) return void(followed = rank.status());
    auto member = PlanControl::Join(coordinator.address(), secret, **rank, kWait);
    if (!member.ok()) return void(followed = member.status());
    followed = FollowAsDestination(**rank, **member, kWait, {});
    member->reset();
    rank->reset();
    loop.Stop();
  });
  ASSERT_TRUE(coordinator.Accept().ok());
  ASSERT_TRUE(coordinator.SendPeers(good).ok());  // the join's table

  // A table whose source is gone, then a good one before the version: the version goes through.
  ASSERT_TRUE(coordinator.SendPeers(gone).ok());
  ASSERT_TRUE(coordinator.SendPeers(good).ok());
  std::memset((*source)->shard_bytes(0).data(), 1, (*source)->shard_bytes(0).size());
  ASSERT_TRUE((*source)->Publish(1).ok());
  ASSERT_TRUE(coordinator.Send(UpdateBeginMsg{.version = 1}).ok());
  auto first = coordinator.Answer();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->type, MessageType::kChunksVerified) << "the good table did not replace the bad one";
  ASSERT_TRUE(coordinator.Send(CommitMsg{1}).ok());
  auto committed = coordinator.Answer();
  ASSERT_TRUE(committed.ok());
  EXPECT_EQ(committed->type, MessageType::kCommitted);

  // A table whose source is gone and nothing after it: that version fails, named; the run goes on.
  ASSERT_TRUE(coordinator.SendPeers(gone).ok());
  ASSERT_TRUE(coordinator.Send(UpdateBeginMsg{.version = 2}).ok());
  auto second = coordinator.Answer();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_EQ(second->type, MessageType::kUpdateFailed);
  auto failed = UpdateFailedMsg::Decode(second->payload);
  ASSERT_TRUE(failed.ok());
  EXPECT_NE(failed->reason.find("src rank 0"), std::string::npos) << failed->reason;
  ASSERT_TRUE(coordinator.Send(AbortMsg{2, "a destination failed"}).ok());
  ASSERT_TRUE(coordinator.Bye().ok());
  destination.join();
  EXPECT_TRUE(followed.ok()) << followed.ToString();
  source->reset();
  src_loop.Stop();
}

}  // namespace
}  // namespace weightport
