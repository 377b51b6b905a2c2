// Keys are revoked when a version is retired (WholePublisherOptions::rotate_keys). A spy joins the
// coordinator as a subscriber with the secret, takes each version's keys and issues raw one-sided
// Gets and Puts with them, as a peer ignoring the protocol would. With rotation the keys of a
// decided version stop working and never reach a later version's bytes; without it (the contrast
// that shows the check can fail) the same key goes on reading every later version. Over UCX TCP
// and shared memory, beside a real subscriber that must still receive every version.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <thread>

#include "engine/testing/raw_ops_test_util.h"
#include "pubsub_test_util.h"
#include "weightport/control/channel.h"
#include "weightport/control/pubsub_messages.h"
#include "weightport/control/version_messages.h"
#include "weightport/engine/common/transport_factory.h"

namespace weightport {
namespace {

using namespace engine_test;
using std::chrono::milliseconds;

// A peer of the coordinator that records what it is granted and verifies every version unread.
class Spy {
 public:
  Spy(TransportFactory factory, const std::string& coordinator, const Secret& secret)
      : peer_(factory, "spy") {
    auto channel = ControlChannel::Connect(coordinator, "spy", PeerRole::kSubscriber, secret, kWait);
    EXPECT_TRUE(channel.ok()) << channel.status().ToString();
    channel_ = std::move(*channel);
  }

  struct Grant {
    size_t connection = 0;  // index into connections_
    RemoteKey key;
    Bytes address;
  };

  // Reads control messages until UpdateBegin(version): the grant the version is served from.
  Result<Grant> AwaitUpdate(uint64_t version) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < deadline) {
      Result<ControlMessage> m = channel_->Receive(milliseconds(100));
      if (!m.ok() && m.status().code() == StatusCode::kTimeout) continue;
      if (!m.ok()) return m.status();
      if (m->type == MessageType::kRegionKeys) {
        WP_ASSIGN_OR_RETURN(RegionKeysMsg keys, RegionKeysMsg::Decode(m->payload));
        if (keys.regions.empty()) return Internal("RegionKeys without regions");
        WP_ASSIGN_OR_RETURN(current_.key, RemoteKey::Deserialize(keys.regions[0].remote_key, "spy"));
        if (keys.transport_address != current_.address || connections_.empty()) {
          current_.address = keys.transport_address;
          WP_ASSIGN_OR_RETURN(auto conn, peer_.Connect(keys.transport_address, "publisher"));
          connections_.push_back(std::move(conn));
        }
        current_.connection = connections_.size() - 1;
      } else if (m->type == MessageType::kUpdateBegin) {
        WP_ASSIGN_OR_RETURN(UpdateBeginMsg begin, UpdateBeginMsg::Decode(m->payload));
        if (begin.version == version) return current_;
      }
    }
    return Timeout("spy: no UpdateBegin for version " + std::to_string(version));
  }

  Status Verify(uint64_t version) { return channel_->Send(ChunksVerifiedMsg{.version = version}); }

  // One raw Get (or Put) of the first 64 bytes the grant's key names; the status it completed with.
  Status Raw(const Grant& g, bool put) { return peer_.Op(connections_[g.connection], g.key, put); }
  // The version the 64 bytes last read say they belong to (FillVersion's words).
  uint64_t ReadVersion() { return VersionOf(std::span(peer_.landing().data(), 64)); }
  bool LandingIsZero() const { return peer_.LandedNothing(); }

 private:
  RawPeer peer_;
  std::vector<std::shared_ptr<Connection>> connections_;  // the publisher's, by grant
  std::unique_ptr<ControlChannel> channel_;
  Grant current_;
};

WholePublisherOptions Options(Cluster& c, TransportFactory factory, bool rotate) {
  WholePublisherOptions po;
  po.make_transport = std::move(factory);
  po.chunk_size = 16 << 10;
  po.coordinator_options = c.CoordOpts();
  po.timing.connect_timeout = kWait;
  po.update_timeout = milliseconds(20'000);
  po.rotate_keys = rotate;
  po.log = c.log.Sink();
  return po;
}

struct Param {
  std::string transport;
  bool rotate;
};

class KeyRevocation : public ::testing::TestWithParam<Param> {};

TEST_P(KeyRevocation, KeysOfADecidedVersionStopWorkingOnlyWhenKeysRotate) {
  const bool rotate = GetParam().rotate;
  auto factory = UcxTransportFactory(GetParam().transport);
  ASSERT_TRUE(factory.ok()) << factory.status().ToString();
  Cluster c;
  auto pub = WholePublisher::Create(SmallModel(), c.secret, Options(c, *factory, rotate));
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  WholeSubscriberOptions so = c.SubscriberOpts(**pub, "sub");
  so.make_transport = *factory;
  auto sub = WholeSubscriber::Connect(c.secret, so);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  Spy spy(*factory, (*pub)->coordinator_address(), c.secret);
  ASSERT_TRUE((*pub)->coordinator()->WaitForSubscribers(2, kWait).ok());

  std::vector<Spy::Grant> grants;
  for (uint64_t v = 1; v <= 3; ++v) {
    FillVersion(**pub, v);
    auto r = (*pub)->Publish(v, PublishMode::kSnapshot);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto grant = spy.AwaitUpdate(v);
    ASSERT_TRUE(grant.ok()) << grant.status().ToString();
    // While its version is in flight, the grant reads that version.
    ASSERT_TRUE(spy.Raw(*grant, false).ok());
    EXPECT_EQ(spy.ReadVersion(), v);
    ASSERT_TRUE(spy.Verify(v).ok());
    auto decided = (*pub)->Wait(v, kWait);
    ASSERT_TRUE(decided.ok()) << decided.status().ToString();
    ASSERT_TRUE(decided->outcome.ok()) << decided->outcome.ToString();
    ExpectLive(**sub, **pub, v);
    grants.push_back(*grant);

    // Every earlier grant, once its version is decided.
    for (size_t g = 0; g < grants.size(); ++g) {
      const std::string which =
          "key of version " + std::to_string(g + 1) + " after version " + std::to_string(v) + " was decided";
      Status get = spy.Raw(grants[g], false);
      if (rotate) {
        EXPECT_FALSE(get.ok()) << which << ": a Get succeeded";
        EXPECT_TRUE(spy.LandingIsZero()) << which << ": bytes arrived";
        EXPECT_NE(get.message().find("publisher"), std::string::npos) << get.ToString();
        EXPECT_FALSE(spy.Raw(grants[g], true).ok()) << which << ": a Put succeeded";
      } else {
        // Without rotation one key serves every version: the old key reads the newest one.
        ASSERT_TRUE(get.ok()) << which << ": " << get.ToString();
        EXPECT_EQ(spy.ReadVersion(), v) << which;
      }
    }
    if (rotate && grants.size() > 1) {
      EXPECT_NE(grants[grants.size() - 2].address, grants.back().address);
    }
  }
  (*sub)->Close();
  (*pub)->Close();
}

// Rotation changes where each version is served from, not what subscribers get: every version in
// both publish modes, bit-exact, and a delta still fetches only the changed chunks from the new grant.
TEST(KeyRotation, SubscribersGetEveryVersionInBothModesAndDeltasStaySmall) {
  Cluster c;
  auto pub = WholePublisher::Create(SmallModel(), c.secret, Options(c, c.Factory(), /*rotate=*/true));
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  auto sub = c.MakeSubscriber(**pub, "sub");
  ASSERT_TRUE(sub);
  ASSERT_TRUE((*pub)->coordinator()->WaitForSubscribers(1, kWait).ok());
  for (uint64_t v = 1; v <= 4; ++v) {
    const PublishMode mode = v % 2 ? PublishMode::kLive : PublishMode::kSnapshot;
    auto w = (*pub)->weights();
    if (v == 1) {
      FillVersion(w, 1);
    } else {
      w[v * 1000] ^= std::byte{1};  // one chunk changes
    }
    const std::vector<std::byte> want(w.begin(), w.end());
    auto r = (*pub)->Publish(v, mode);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (mode == PublishMode::kSnapshot) FillVersion(w, 99);  // the trainer goes on at once
    auto decided = (*pub)->Wait(v, kWait);
    ASSERT_TRUE(decided.ok()) << decided.status().ToString();
    ASSERT_TRUE(decided->outcome.ok()) << "v" << v << ": " << decided->outcome.ToString();
    EXPECT_GT(decided->snapshot_copy.count(), 0) << "every rotated version is copied into its grant";
    ASSERT_TRUE(sub->WaitForVersion(v, kWait).ok());
    auto pin = sub->Acquire();
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(std::memcmp(pin->bytes().data(), want.data(), want.size()), 0) << "v" << v;
    auto report = (*pub)->coordinator()->WaitForVersion(v, kWait);
    ASSERT_TRUE(report.ok());
    ASSERT_EQ(report->subscribers.size(), 1u);
    if (v == 1) {
      EXPECT_EQ(report->subscribers[0].bytes, (*pub)->model_bytes());
    } else {
      EXPECT_LE(report->subscribers[0].bytes, 16u << 10) << "v" << v;
    }
    if (mode == PublishMode::kSnapshot) std::memcpy(w.data(), want.data(), want.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Ucx, KeyRevocation,
                         ::testing::Values(Param{"tcp", true}, Param{"shm", true}, Param{"tcp", false},
                                           Param{"shm", false}),
                         [](const auto& info) {
                           return info.param.transport + (info.param.rotate ? "_rotating" : "_per_session");
                         });

}  // namespace
}  // namespace weightport
