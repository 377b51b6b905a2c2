// The quorum commit policy: a member that fails or is lost is dropped from the version, which
// commits to the others while at least `quorum` remain; the dropped one keeps its previous version
// and catches up with the next.
#include <cstring>

#include <gtest/gtest.h>

#include "pubsub_test_util.h"

namespace weightport {
namespace {

using namespace engine_test;

TEST(Quorum, AFailingMemberIsDroppedAndTheOthersCommit) {
  WholeCoordinatorOptions copts;
  copts.quorum = 2;
  Cluster c(copts);
  auto pub = c.MakePublisher(SmallModel());
  auto plan = std::make_shared<FaultPlan>(3);
  auto a = c.MakeSubscriber(*pub, "a");
  auto b = c.MakeSubscriber(*pub, "b");
  auto bad = c.MakeSubscriber(*pub, "bad", plan);
  ASSERT_TRUE(pub->coordinator()->WaitForSubscribers(3, kWait).ok());
  FillVersion(*pub, 1);
  const std::vector<std::byte> v1(pub->weights().begin(), pub->weights().end());
  ASSERT_TRUE(pub->Publish(1, PublishMode::kLive).ok());
  for (WholeSubscriber* s : {a.get(), b.get(), bad.get()}) ExpectLive(*s, *pub, 1);

  plan->set_fail_after(2);  // the bad subscriber's Gets fail from the third on
  FillVersion(*pub, 2);
  auto r = pub->Publish(2, PublishMode::kLive);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->outcome.ok()) << r->outcome.ToString();
  ExpectLive(*a, *pub, 2);
  ExpectLive(*b, *pub, 2);
  auto pin = bad->Acquire();  // dropped: still version 1, bit-exact
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(pin->version(), 1u);
  EXPECT_EQ(std::memcmp(pin->bytes().data(), v1.data(), v1.size()), 0);
  pin = Status(Cancelled("released"));
  auto report = pub->coordinator()->WaitForVersion(2, kWait);
  ASSERT_TRUE(report.ok());
  bool named = false;
  for (const auto& s : report->subscribers) {
    if (s.name == "bad") {
      named = true;
      EXPECT_FALSE(s.verified);
      EXPECT_NE(s.dropped.find("chunk"), std::string::npos) << s.dropped;
    } else {
      EXPECT_TRUE(s.verified && s.dropped.empty()) << s.name;
    }
  }
  EXPECT_TRUE(named);

  plan->Clear();  // the dropped one catches up with the next version
  FillVersion(*pub, 3);
  auto r3 = pub->Publish(3, PublishMode::kLive);
  ASSERT_TRUE(r3.ok() && r3->outcome.ok());
  for (WholeSubscriber* s : {a.get(), b.get(), bad.get()}) ExpectLive(*s, *pub, 3);
}

TEST(Quorum, BelowTheQuorumTheVersionIsAbortedForEveryone) {
  WholeCoordinatorOptions copts;
  copts.quorum = 2;
  Cluster c(copts);
  auto pub = c.MakePublisher(SmallModel());
  auto plan = std::make_shared<FaultPlan>(3);
  auto good = c.MakeSubscriber(*pub, "good");
  auto bad = c.MakeSubscriber(*pub, "bad", plan);
  ASSERT_TRUE(pub->coordinator()->WaitForSubscribers(2, kWait).ok());
  FillVersion(*pub, 1);
  ASSERT_TRUE(pub->Publish(1, PublishMode::kLive).ok());
  plan->set_fail_after(2);
  FillVersion(*pub, 2);
  auto r = pub->Publish(2, PublishMode::kLive);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->outcome.ok());
  EXPECT_NE(r->outcome.message().find("1 member(s) left, the quorum is 2"), std::string::npos)
      << r->outcome.message();
  for (WholeSubscriber* s : {good.get(), bad.get()}) {
    auto pin = s->Acquire();
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(pin->version(), 1u);
  }
}

}  // namespace
}  // namespace weightport
