// A publisher asks the coordinator to hold a version for its subscribers (WholeSubscriberWait), and
// learns from the Commit how many made it live: with an embedded and a standalone coordinator.
#include <chrono>
#include <mutex>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/pubsub/pubsub_test_util.h"
#include "weightport/control/pubsub_messages.h"
#include "weightport/control/version_messages.h"
#include "weightport/engine/common/arena.h"
#include "weightport/transport/progress_loop.h"

namespace weightport {
namespace {

using engine_test::Cluster;
using engine_test::ExpectLive;
using engine_test::FillVersion;
using engine_test::kWait;
using engine_test::LogCapture;
using engine_test::SmallModel;
using engine_test::VersionOf;
using std::chrono::milliseconds;

TEST(WholeSubscriberWait, AVersionWaitsForASubscriberThatJoinsLateAndCountsIt) {
  Cluster c;
  auto coordinator = WholeCoordinator::Start("127.0.0.1", 0, c.secret, c.CoordOpts());
  ASSERT_TRUE(coordinator.ok());
  auto pub = c.MakePublisher(SmallModel(), milliseconds(200), (*coordinator)->address());
  ASSERT_NE(pub, nullptr);
  std::unique_ptr<WholeSubscriber> sub;
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

TEST(WholeSubscriberWait, TooFewSubscribersAbortTheVersionNamingHowManyCame) {
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

// The index of the first log line holding both `a` and `b`, or -1.
int LineWith(LogCapture& log, std::string_view a, std::string_view b) {
  std::lock_guard<std::mutex> lock(log.mu);
  for (size_t i = 0; i < log.lines.size(); ++i)
    if (log.lines[i].find(a) != std::string::npos && log.lines[i].find(b) != std::string::npos)
      return static_cast<int>(i);
  return -1;
}

TEST(WholeSubscriberWait, TheFirstVersionWaitsForStagingMemoryPreparedAtJoin) {
  Cluster c;
  auto pub = c.MakePublisher(SmallModel());
  auto twice = c.MakeSubscriber(*pub, "double");
  auto once = c.MakeSubscriber(*pub, "in-place", nullptr, SwapMode::kInPlace);
  ASSERT_NE(twice, nullptr);
  ASSERT_NE(once, nullptr);
  FillVersion(*pub, 1);
  auto report = pub->Publish(1, PublishMode::kLive, {.at_least = 2, .within = milliseconds(20'000)});
  ASSERT_TRUE(report.ok() && report->outcome.ok())
      << (report.ok() ? report->outcome : report.status()).ToString();
  EXPECT_EQ(report->subscribers, 2u);
  ExpectLive(*twice, *pub, 1);
  ExpectLive(*once, *pub, 1);
  // Both said StagingReady before the version began: the copy time holds no page zero-fill.
  const int began = LineWith(c.log, "publishing version 1", "");
  ASSERT_GE(began, 0);
  for (const char* name : {"'double'", "'in-place'"}) {
    const int ready = LineWith(c.log, name, " ready: ");
    EXPECT_GE(ready, 0) << name;
    EXPECT_LT(ready, began) << name;
  }
  // What preparing cost is in the first version's report, per subscriber: two buffers or one.
  auto first = pub->coordinator()->WaitForVersion(1, kWait);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->subscribers.size(), 2u);
  for (const WholeSubscriberVersionReport& s : first->subscribers) {
    EXPECT_EQ(s.staging_bytes, (s.name == "double" ? 2 : 1) * pub->model_bytes()) << s.name;
    EXPECT_GT(s.staging_prepare.count(), 0) << s.name;
  }
  // And only there.
  FillVersion(*pub, 2);
  auto next = pub->Publish(2, PublishMode::kLive);
  ASSERT_TRUE(next.ok() && next->outcome.ok()) << (next.ok() ? next->outcome : next.status()).ToString();
  auto second = pub->coordinator()->WaitForVersion(2, kWait);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  for (const WholeSubscriberVersionReport& s : second->subscribers) EXPECT_EQ(s.staging_bytes, 0u) << s.name;
  ExpectLive(*twice, *pub, 2);
  ExpectLive(*once, *pub, 2);
}

TEST(WholeSubscriberWait, ASubscriberThatJoinedBeforeThePublisherPreparesWhenItsKeysArrive) {
  Cluster c;
  auto coordinator = WholeCoordinator::Start("127.0.0.1", 0, c.secret, c.CoordOpts());
  ASSERT_TRUE(coordinator.ok()) << coordinator.status().ToString();
  auto sub = WholeSubscriber::Connect(c.secret, c.SubscriberOpts((*coordinator)->address(), "early"));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_TRUE((*coordinator)->WaitForSubscribers(1, kWait).ok());
  auto pub = c.MakePublisher(SmallModel(), milliseconds(200), (*coordinator)->address());
  ASSERT_NE(pub, nullptr);
  FillVersion(*pub, 1);
  // Held until it is ready: it is, once the publisher's first keys reach it, before the version.
  auto report = pub->Publish(1, PublishMode::kLive, {.at_least = 1, .within = milliseconds(20'000)});
  ASSERT_TRUE(report.ok() && report->outcome.ok())
      << (report.ok() ? report->outcome : report.status()).ToString();
  ExpectLive(**sub, *pub, 1);
  const int ready = LineWith(c.log, "'early'", " ready: ");
  EXPECT_GE(ready, 0);
  EXPECT_LT(ready, LineWith(c.log, "publishing version 1", ""));
  auto first = (*coordinator)->WaitForVersion(1, kWait);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->subscribers.size(), 1u);
  EXPECT_EQ(first->subscribers[0].staging_bytes, 2 * pub->model_bytes());
}

TEST(WholeSubscriberWait, ASubscriberThatNeverSaysStagingReadyIsNamedWhenTheWaitEnds) {
  Cluster c;
  auto pub = c.MakePublisher(SmallModel());
  // Connected, but it never prepares anything.
  auto raw =
      ControlChannel::Connect(pub->coordinator_address(), "mute", PeerRole::kSubscriber, c.secret, kWait);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  ASSERT_TRUE(pub->coordinator()->WaitForSubscribers(1, kWait).ok());
  FillVersion(*pub, 1);
  auto report = pub->Publish(1, PublishMode::kLive, {.at_least = 1, .within = milliseconds(300)});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_FALSE(report->outcome.ok());
  EXPECT_NE(report->outcome.message().find(
                "only 0 of 1 subscriber(s) had their staging memory ready (1 connected) within 0.3 s"),
            std::string::npos)
      << report->outcome.message();
}

// A publisher's region may hold more than its model: the staging memory prepared at the region's
// size is made again at the first manifest's, and the version lands whole.
TEST(WholeSubscriberWait, StagingPreparedForALargerRegionIsMadeAgainAtTheManifestsSize) {
  Cluster c;
  auto coordinator = WholeCoordinator::Start("127.0.0.1", 0, c.secret, c.CoordOpts());
  ASSERT_TRUE(coordinator.ok()) << coordinator.status().ToString();
  const std::vector<TensorMeta> model = SmallModel();
  uint64_t model_bytes = 0;
  for (const TensorMeta& t : model) model_bytes += t.bytes;
  // The publisher side by hand: a region of twice the model, the model at its start.
  auto transport = c.Factory()("big-publisher");
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  ProgressLoop loop(std::move(*transport));
  auto region = loop.Call([&](Transport& t) { return AllocateArena(t, 2 * model_bytes, "big region"); });
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  std::span<std::byte> bytes((*region)->data(), model_bytes);
  FillVersion(bytes, 1);
  std::vector<TensorBytes> views;
  for (uint64_t i = 0, offset = 0; i < model.size(); offset += model[i].bytes, ++i)
    views.push_back({model[i], bytes.subspan(offset, model[i].bytes)});
  auto manifest = Manifest::Build(1, views, 16 << 10);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  auto pub = ControlChannel::Connect((*coordinator)->address(), "big-publisher", PeerRole::kPublisher,
                                     c.secret, kWait);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  RegionKeysMsg keys;
  keys.transport_address = loop.Call([](Transport& t) { return t.address(); });
  keys.regions.push_back({0, (*region)->remote_key().Serialize()});
  ASSERT_TRUE((*pub)->Send(keys).ok());

  auto sub = WholeSubscriber::Connect(c.secret, c.SubscriberOpts((*coordinator)->address(), "sub"));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_TRUE((*coordinator)->WaitForSubscribers(1, kWait).ok());
  ASSERT_TRUE((*pub)->Send(ManifestMsg{manifest->ToJson().dump()}).ok());
  ASSERT_TRUE(
      (*pub)
          ->Send(UpdateBeginMsg{.version = 1, .source_region = 0, .min_subscribers = 1, .wait_ms = 20'000})
          .ok());
  auto report = (*coordinator)->WaitForVersion(1, kWait);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(report->outcome.ok()) << report->outcome.ToString();
  ASSERT_EQ(report->subscribers.size(), 1u);
  EXPECT_EQ(report->subscribers[0].staging_bytes, 2 * 2 * model_bytes);  // prepared for the region
  ASSERT_TRUE((*sub)->WaitForVersion(1, kWait).ok());
  {
    auto pin = (*sub)->Acquire();
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    ASSERT_EQ(pin->bytes().size(), model_bytes);
    EXPECT_EQ(VersionOf(pin->bytes()), 1u);
  }
  (*sub)->Close();
  loop.Call([&](Transport&) { region->reset(); });
}

TEST(WholeSubscriberWait, ACommitToNobodyCarriesACountOfZero) {
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
