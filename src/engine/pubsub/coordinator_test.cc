// The coordinator's protocol rules, driven by raw control channels standing in for peers.
#include "weightport/engine/pubsub/coordinator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pubsub_test_util.h"
#include "weightport/control/pubsub_messages.h"
#include "weightport/control/version_messages.h"

namespace weightport {
namespace {

using namespace engine_test;
using control_test::IdleSocket;
using std::chrono::milliseconds;

struct Fixture {
  Secret secret = MakeSecret('c');
  LogCapture log;
  std::unique_ptr<WholeCoordinator> coordinator;
  Fixture() {
    WholeCoordinatorOptions o;
    o.log = log.Sink();
    auto c = WholeCoordinator::Start("127.0.0.1", 0, secret, o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    coordinator = std::move(*c);
  }
  std::unique_ptr<ControlChannel> Join(const std::string& name, PeerRole role) {
    auto ch = ControlChannel::Connect(coordinator->address(), name, role, secret, kWait);
    EXPECT_TRUE(ch.ok()) << ch.status().ToString();
    return ch.ok() ? std::move(*ch) : nullptr;
  }
};

// The next message that is not a heartbeat.
Result<ControlMessage> Next(ControlChannel& ch) {
  for (int i = 0; i < 100; ++i) {
    WP_ASSIGN_OR_RETURN(ControlMessage m, ch.Receive(kWait));
    if (m.type != MessageType::kHeartbeat) return m;
  }
  return Timeout("only heartbeats");
}

std::string ManifestJson(uint64_t version) {
  std::vector<TensorMeta> metas = {*TensorMeta::Make("w", DType::kF32, {4})};
  return Manifest::FromMetas(version, metas)->ToJson().dump();
}

TEST(WholeCoordinator, SubscriberSendingAManifestIsRefusedAndRemoved) {
  Fixture f;
  auto sub = f.Join("sub", PeerRole::kSubscriber);
  ASSERT_TRUE(f.coordinator->WaitForSubscribers(1, kWait).ok());
  ASSERT_TRUE(sub->Send(ManifestMsg{ManifestJson(1)}).ok());
  auto m = Next(*sub);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kPermissionDenied) << m.status().ToString();
  EXPECT_NE(m.status().message().find("only the publisher sends manifests"), std::string::npos);
  for (int i = 0; i < 100 && !f.coordinator->Subscribers().empty(); ++i)
    std::this_thread::sleep_for(milliseconds(20));
  EXPECT_TRUE(f.coordinator->Subscribers().empty());
  EXPECT_TRUE(f.log.Contains("protocol violation"));
}

TEST(WholeCoordinator, SecondPublisherAndDuplicateNamesAreRefused) {
  Fixture f;
  auto pub = f.Join("trainer", PeerRole::kPublisher);
  auto second = f.Join("trainer-2", PeerRole::kPublisher);
  auto m = Next(*second);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("publisher 'trainer' is already connected"), std::string::npos)
      << m.status().ToString();
  auto a = f.Join("replica", PeerRole::kSubscriber);
  auto b = f.Join("replica", PeerRole::kSubscriber);
  auto mb = Next(*b);
  ASSERT_FALSE(mb.ok());
  EXPECT_NE(mb.status().message().find("'replica' is already connected"), std::string::npos);
}

TEST(WholeCoordinator, UpdateBeginWithoutManifestOrKeysIsAbortedWithTheReason) {
  Fixture f;
  auto pub = f.Join("trainer", PeerRole::kPublisher);
  ASSERT_TRUE(pub->Send(UpdateBeginMsg{1, 0, 0}).ok());
  auto m = Next(*pub);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->type, MessageType::kAbort);
  EXPECT_NE(AbortMsg::Decode(m->payload)->reason.find("no manifest for version 1"), std::string::npos);

  ASSERT_TRUE(pub->Send(ManifestMsg{ManifestJson(1)}).ok());
  ASSERT_TRUE(pub->Send(UpdateBeginMsg{1, 0, 0}).ok());
  m = Next(*pub);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->type, MessageType::kAbort);
  EXPECT_NE(AbortMsg::Decode(m->payload)->reason.find("no RegionKeys"), std::string::npos);
}

TEST(WholeCoordinator, VersionsMustIncreaseAndOnlyOneIsInFlight) {
  Fixture f;
  auto pub = f.Join("trainer", PeerRole::kPublisher);
  auto sub = f.Join("replica", PeerRole::kSubscriber);
  ASSERT_TRUE(f.coordinator->WaitForSubscribers(1, kWait).ok());
  RegionKeysMsg keys{.transport_address = Bytes(4), .regions = {{0, Bytes(8)}}};
  ASSERT_TRUE(pub->Send(keys).ok());
  ASSERT_TRUE(pub->Send(ManifestMsg{ManifestJson(5)}).ok());
  ASSERT_TRUE(pub->Send(UpdateBeginMsg{5, 0, 0}).ok());
  // The subscriber is told, in order: keys, manifest, begin.
  for (MessageType want : {MessageType::kRegionKeys, MessageType::kManifest, MessageType::kUpdateBegin}) {
    auto m = Next(*sub);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->type, want);
  }
  ASSERT_TRUE(pub->Send(ManifestMsg{ManifestJson(6)}).ok());
  ASSERT_TRUE(pub->Send(UpdateBeginMsg{6, 0, 0}).ok());
  auto busy = Next(*pub);
  ASSERT_TRUE(busy.ok());
  ASSERT_EQ(busy->type, MessageType::kAbort);
  EXPECT_NE(AbortMsg::Decode(busy->payload)->reason.find("version 5 is still in flight"), std::string::npos);

  ASSERT_TRUE(sub->Send(ChunksVerifiedMsg{5, 1, 16, 1000, 0}).ok());
  auto commit = Next(*pub);
  ASSERT_TRUE(commit.ok());
  EXPECT_EQ(commit->type, MessageType::kCommit);
  ASSERT_TRUE(sub->Send(CommittedMsg{5, 250}).ok());
  auto report = f.coordinator->WaitForVersion(5, kWait);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->outcome.ok());
  ASSERT_EQ(report->subscribers.size(), 1u);
  EXPECT_EQ(report->subscribers[0].pause.count(), 250);
  EXPECT_EQ(report->subscribers[0].bytes, 16u);

  ASSERT_TRUE(pub->Send(ManifestMsg{ManifestJson(4)}).ok());
  ASSERT_TRUE(pub->Send(UpdateBeginMsg{4, 0, 0}).ok());
  auto old = Next(*pub);
  ASSERT_TRUE(old.ok());
  ASSERT_EQ(old->type, MessageType::kAbort);
  EXPECT_NE(AbortMsg::Decode(old->payload)->reason.find("not newer than the live version 5"),
            std::string::npos);
  EXPECT_EQ(f.coordinator->WaitForVersion(99, milliseconds(10)).status().code(), StatusCode::kNotFound);
}

uint16_t PortOf(const std::string& address) {
  return static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

TEST(WholeCoordinator, IdleSocketsDoNotDelayDeclaringASilentPeerLost) {
  Secret secret = MakeSecret('c');
  LogCapture log;
  WholeCoordinatorOptions o;
  o.log = log.Sink();
  o.heartbeat_interval = milliseconds(100);
  o.peer_timeout = milliseconds(1000);
  // A silent socket could hold Accept this long: far longer than the peer timeout, so that the check
  // below (at half of it) tells the bug from a loaded machine.
  o.control.handshake_timeout = milliseconds(20000);
  auto c = WholeCoordinator::Start("127.0.0.1", 0, secret, o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto sub = ControlChannel::Connect((*c)->address(), "silent", PeerRole::kSubscriber, secret, kWait);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_TRUE((*c)->WaitForSubscribers(1, kWait).ok());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<IdleSocket>> idle;
  for (int i = 0; i < 6; ++i) idle.push_back(std::make_unique<IdleSocket>(PortOf((*c)->address())));
  // The subscriber answers nothing: lost after peer_timeout, whatever the idle sockets do.
  while (!(*c)->Subscribers().empty() && std::chrono::steady_clock::now() - start < milliseconds(10000))
    std::this_thread::sleep_for(milliseconds(25));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE((*c)->Subscribers().empty());
  EXPECT_LT(took, milliseconds(10000))
      << "lost after " << std::chrono::duration_cast<milliseconds>(took).count() << " ms";
}

TEST(WholeCoordinator, TwoHundredIdleSocketsDoNotKeepASubscriberOut) {
  Fixture f;
  std::vector<std::unique_ptr<IdleSocket>> idle;
  for (int i = 0; i < 200; ++i)
    idle.push_back(std::make_unique<IdleSocket>(PortOf(f.coordinator->address())));
  auto sub = ControlChannel::Connect(f.coordinator->address(), "replica", PeerRole::kSubscriber, f.secret,
                                     milliseconds(2000));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  EXPECT_TRUE(f.coordinator->WaitForSubscribers(1, milliseconds(2000)).ok());
}

}  // namespace
}  // namespace weightport
