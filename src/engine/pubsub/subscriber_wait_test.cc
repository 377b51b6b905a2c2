// A publisher asks the coordinator to hold a version for its subscribers (SubscriberWait), and
// learns from the Commit how many made it live: with an embedded and a standalone coordinator.
#include <chrono>
#include <thread>

#include "engine/pubsub/pubsub_test_util.h"

namespace weightport {
namespace {

using engine_test::Cluster;
using engine_test::ExpectLive;
using engine_test::FillVersion;
using engine_test::kWait;
using engine_test::SmallModel;
using std::chrono::milliseconds;

TEST(SubscriberWait, AVersionWaitsForASubscriberThatJoinsLateAndCountsIt) {
  Cluster c;
  auto coordinator = Coordinator::Start("127.0.0.1", 0, c.secret, c.CoordOpts());
  ASSERT_TRUE(coordinator.ok());
  auto pub = c.MakePublisher(SmallModel(), milliseconds(200), (*coordinator)->address());
  ASSERT_NE(pub, nullptr);
  std::unique_ptr<Subscriber> sub;
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(500));
    sub = c.MakeSubscriber(*pub, "late");
  });
  FillVersion(*pub, 1);
  auto report = pub->Publish(1, PublishMode::kLive, {.at_least = 1, .within = milliseconds(20'000)});
  late.join();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(report->outcome.ok()) << report->outcome.ToString();
  EXPECT_EQ(report->subscribers, 1u);
  ASSERT_NE(sub, nullptr);
  ExpectLive(*sub, *pub, 1);
}

TEST(SubscriberWait, TooFewSubscribersAbortTheVersionNamingHowManyCame) {
  Cluster c;
  auto pub = c.MakePublisher(SmallModel());
  auto sub = c.MakeSubscriber(*pub, "only-one");
  ASSERT_TRUE(pub->coordinator()->WaitForSubscribers(1, kWait).ok());
  FillVersion(*pub, 1);
  auto report = pub->Publish(1, PublishMode::kLive, {.at_least = 2, .within = milliseconds(300)});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_FALSE(report->outcome.ok());
  EXPECT_NE(report->outcome.message().find("only 1 of 2 subscriber(s) connected within 0.3 s"),
            std::string::npos)
      << report->outcome.message();
  EXPECT_EQ(sub->live_version(), 0u);
  auto decided = pub->coordinator()->WaitForVersion(1, kWait);  // the embedded report says so too
  ASSERT_TRUE(decided.ok()) << decided.status().ToString();
  EXPECT_FALSE(decided->outcome.ok());

  // The coordinator goes on: the next version, asking for what is there, commits.
  FillVersion(*pub, 2);
  auto next = pub->Publish(2, PublishMode::kLive, {.at_least = 1, .within = milliseconds(300)});
  ASSERT_TRUE(next.ok() && next->outcome.ok()) << (next.ok() ? next->outcome : next.status()).ToString();
  EXPECT_EQ(next->subscribers, 1u);
  ExpectLive(*sub, *pub, 2);
}

TEST(SubscriberWait, ACommitToNobodyCarriesACountOfZero) {
  Cluster c;
  auto pub = c.MakePublisher(SmallModel());
  FillVersion(*pub, 1);
  auto report = pub->Publish(1, PublishMode::kLive);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(report->outcome.ok()) << report->outcome.ToString();
  EXPECT_EQ(report->subscribers, 0u);
}

}  // namespace
}  // namespace weightport
