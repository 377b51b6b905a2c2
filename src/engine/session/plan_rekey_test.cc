// Keys per version inside a plan (PlanServiceOptions::rotate_keys): a peer dropped from a plan
// session cannot read or write the versions after the one it left in. Checked over UCX TCP and
// shared memory, first on one rank (PlanRank::Rekey), then end to end: a spy joins a plan session
// as destination rank 1 with the secret, verifies version 1 with raw one-sided Gets of the source
// and leaves; the others commit version 2 under a quorum of one. With rotation the spy's version-1
// key fails and no version-2 byte lands; without it (the contrast that shows the check can fail)
// the same key reads version 2.
//
// What revokes differs by transport. Over TCP the old transport's worker is gone: nothing answers
// the old key (UCX reports the endpoint timed out). On one host the arena stays mapped where it was
// and same-host Gets of plain memory go through CMA, whose only check is the kernel's ptrace
// permission; the old key fails there because the peer's connection sees the old transport's
// "closed" word and refuses. A process of the same user that bypasses weightport's transport can
// read the arena with or without a key: on one host the boundary is the OS user, not the key.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "engine/pubsub/pubsub_test_util.h"
#include "engine/testing/raw_ops_test_util.h"
#include "weightport/control/channel.h"
#include "weightport/control/plan_messages.h"
#include "weightport/control/version_messages.h"
#include "weightport/engine/rank/plan_rank.h"
#include "weightport/engine/session/plan_member.h"
#include "weightport/engine/session/plan_publisher.h"
#include "weightport/engine/session/plan_service.h"
#include "weightport/engine/session/plan_subscriber.h"
#include "weightport/transport/progress_loop.h"
#include "weightport/transport/ucx_transport.h"

// A namespace of its own: the unity build compiles this file together with other tests.
namespace weightport::plan_rekey_test {
namespace {

using namespace engine_test;
using std::chrono::milliseconds;

struct Param {
  std::string transport;
  bool rotate;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.transport << (p.rotate ? ", rotating" : ""); }
std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return info.param.transport + (info.param.rotate ? "_rotating" : "_per_session");
}

class PlanRankRekey : public ::testing::TestWithParam<std::string> {};

// Rekey moves the rank to a fresh transport: the key from before stops working, named, and the new
// key reads the same shards, which never moved.
TEST_P(PlanRankRekey, KeysFromBeforeARekeyStopWorkingAndTheNewKeyReadsTheSameShards) {
  auto factory = UcxTransportFactory(GetParam());
  ASSERT_TRUE(factory.ok()) << factory.status().ToString();
  auto first = (*factory)("src rank 0");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto old_loop = std::make_unique<ProgressLoop>(std::move(*first));
  PlanRankOptions options;
  options.rotate_keys = true;
  auto owner = PlanRank::Create(OneToOnePlan(), {PlanSide::kSource, 0}, *old_loop, options);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  std::span<std::byte> shard = (*owner)->shard_bytes(0);
  std::memset(shard.data(), 0x5a, 64);
  const PlanPeer before = (*owner)->peer_info();

  RawPeer peer(*factory, "peer");
  auto old_conn = peer.Connect(before.address, "src rank 0");
  ASSERT_TRUE(old_conn.ok()) << old_conn.status().ToString();
  ASSERT_TRUE(peer.Op(*old_conn, before.key, false).ok());
  EXPECT_EQ(peer.landing()[0], std::byte{0x5a});

  auto second = (*factory)("src rank 0, rekeyed");
  ASSERT_TRUE(second.ok());
  auto fresh = std::make_unique<ProgressLoop>(std::move(*second));
  ASSERT_TRUE((*owner)->Rekey(*fresh).ok());
  old_loop->Stop();
  old_loop.reset();
  std::memset(shard.data(), 0x6b, 64);  // the next version's bytes
  ASSERT_EQ((*owner)->shard_bytes(0).data(), shard.data()) << "the shards moved";

  peer.ExpectRefused(*old_conn, before.key, "src rank 0", "the key from before the rekey");
  EXPECT_EQ(shard[0], std::byte{0x6b}) << "a Put with the old key landed";

  const PlanPeer after = (*owner)->peer_info();
  EXPECT_NE(after.address, before.address);
  auto new_conn = peer.Connect(after.address, "src rank 0, rekeyed");
  ASSERT_TRUE(new_conn.ok()) << new_conn.status().ToString();
  ASSERT_TRUE(peer.Op(*new_conn, after.key, false).ok());
  EXPECT_EQ(peer.landing()[0], std::byte{0x6b});
  owner->reset();
  fresh->Stop();
}

INSTANTIATE_TEST_SUITE_P(Ucx, PlanRankRekey, ::testing::Values("tcp", "shm"));

// One f32 tensor "w" [kRows, kCols]; element `flat` of version v is v * 100000 + flat, so the
// first word of any run of it names its version.
constexpr int64_t kRows = 64, kCols = 32;
constexpr float kVersionScale = 100000;

LayoutOffer Offer(PlanSide side, int rank, int side_ranks, std::string host, Slice slice) {
  LayoutOffer o;
  o.endpoint = {side, rank};
  o.side_ranks = side_ranks;
  o.host = std::move(host);
  o.placement = *Placement::Make({*TensorMeta::Make("w", DType::kF32, {kRows, kCols})});
  o.placement.AddShard(rank, "w", std::move(slice));
  return o;
}

uint64_t VersionAt(const std::byte* p) {
  float f;
  std::memcpy(&f, p, sizeof f);
  return static_cast<uint64_t>(f / kVersionScale);
}

// Destination rank 1 played by hand: it offers its layout, joins with keys of a landing buffer of
// its own and answers UpdateBegin without receiving, after reading the source with raw Gets.
class PlanSpy {
 public:
  explicit PlanSpy(const TransportFactory& factory) : peer_(factory, "dst-1") {}
  ~PlanSpy() { Leave(); }

  // The rendezvous and the join; keeps source rank 0's address and key from the peer table.
  Status Join(const std::string& coordinator, const Secret& secret, const LayoutOffer& offer) {
    WP_ASSIGN_OR_RETURN(auto plan, OfferLayout(coordinator, secret, offer, kWait));
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    WP_ASSIGN_OR_RETURN(channel_, RetryWhileUnreachable(deadline, milliseconds(100), [&](milliseconds left) {
                          return ControlChannel::Connect(coordinator, "dst-1", PeerRole::kSubscriber, secret,
                                                         left);
                        }));
    const Bytes address = peer_.loop().Call([](Transport& t) { return t.address(); });
    WP_RETURN_IF_ERROR(channel_->Send(
        PlanJoinMsg{1, 1, plan.digest, address, peer_.local().remote_key().Serialize(), {}, ""}));
    WP_ASSIGN_OR_RETURN(ControlMessage reply, channel_->Receive(kWait));
    if (reply.type != MessageType::kPlanPeers) return Internal("the spy was not sent the peer table");
    WP_ASSIGN_OR_RETURN(PlanPeersMsg peers, PlanPeersMsg::Decode(reply.payload));
    for (const auto& p : peers.peers) {
      if (p.side != 0 || p.rank != 0) continue;
      WP_ASSIGN_OR_RETURN(source_key_, RemoteKey::Deserialize(p.remote_key, "src-0"));
      const Bytes src = p.transport_address;
      WP_ASSIGN_OR_RETURN(source_, peer_.Connect(src, "src-0"));
    }
    return source_ ? Status::Ok() : Internal("the peer table has no src-0");
  }

  // Waits for UpdateBegin(version), reads the source raw, says verified, waits for the commit and
  // confirms it. The version the read bytes belong to.
  Result<uint64_t> TakeVersion(uint64_t version) {
    WP_RETURN_IF_ERROR(AwaitMessage(MessageType::kUpdateBegin));
    WP_RETURN_IF_ERROR(Raw(false));
    const uint64_t read = ReadVersion();
    WP_RETURN_IF_ERROR(channel_->Send(ChunksVerifiedMsg{.version = version}));
    WP_RETURN_IF_ERROR(AwaitMessage(MessageType::kCommit));
    WP_RETURN_IF_ERROR(channel_->Send(CommittedMsg{version, 0}));
    return read;
  }
  // Drops out of the session: the coordinator loses this rank.
  void Leave() {
    if (channel_) channel_->Close();
    channel_.reset();
  }

  // One raw Get (or Put of zeros) of the source's first 64 bytes with the key it was given.
  Status Raw(bool put) { return peer_.Op(source_, source_key_, put); }
  uint64_t ReadVersion() { return VersionAt(peer_.landing().data()); }
  bool LandedNothing() const { return peer_.LandedNothing(); }

 private:
  Status AwaitMessage(MessageType type) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < deadline) {
      Result<ControlMessage> m = channel_->Receive(milliseconds(100));
      if (!m.ok() && m.status().code() == StatusCode::kTimeout) continue;
      if (!m.ok()) return m.status();
      if (m->type == type) return Status::Ok();
    }
    return Timeout("spy: no " + std::string(MessageTypeName(type)));
  }

  RawPeer peer_;
  std::unique_ptr<ControlChannel> channel_;
  std::shared_ptr<Connection> source_;
  RemoteKey source_key_;
};

void Fill(PlanPublisher& pub, uint64_t v) {
  PlanShardView s = pub.shard(0);
  auto* out = reinterpret_cast<float*>(s.bytes.data());
  for (int64_t i = 0; i < kRows * kCols; ++i) out[i] = static_cast<float>(v) * kVersionScale + i;
}

class PlanKeyRevocation : public ::testing::TestWithParam<Param> {};

TEST_P(PlanKeyRevocation, ADroppedPeerReadsNoLaterVersionOnlyWhenKeysRotate) {
  const bool rotate = GetParam().rotate;
  auto factory = UcxTransportFactory(GetParam().transport);
  ASSERT_TRUE(factory.ok()) << factory.status().ToString();
  const Secret secret = MakeSecret('r');
  PlanServiceOptions so;
  so.rendezvous.timeout = so.join_timeout = so.update_timeout = kWait;
  so.rendezvous.plan.chunk_bytes = 1024;
  so.quorum = 1;
  so.rotate_keys = rotate;
  auto service = PlanService::Start(secret, so);
  ASSERT_TRUE(service.ok()) << service.status().ToString();

  // Disjoint halves on two hosts: neither destination relays for the other.
  PlanMemberOptions mo;
  mo.coordinator = (*service)->address();
  mo.make_transport = *factory;
  mo.connect_timeout = mo.update_timeout = mo.pin_timeout = kWait;
  mo.rank.timeout = kWait;
  mo.rank.rotate_keys = rotate;
  PlanMemberOptions src_options = mo, dst_options = mo;
  src_options.offer = Offer(PlanSide::kSource, 0, 1, "trainer", Slice::MakeBox({0, 0}, {kRows, kCols}));
  dst_options.offer =
      Offer(PlanSide::kDestination, 0, 2, "server-a", Slice::MakeBox({0, 0}, {kRows / 2, kCols}));
  const LayoutOffer spy_offer =
      Offer(PlanSide::kDestination, 1, 2, "server-b", Slice::MakeBox({kRows / 2, 0}, {kRows / 2, kCols}));
  PlanSpy spy(*factory);
  Result<std::unique_ptr<PlanPublisher>> pub = Internal("not joined");
  Result<std::unique_ptr<PlanSubscriber>> sub = Internal("not joined");
  Status spy_joined;
  {
    std::jthread a([&] { pub = PlanPublisher::Join(secret, src_options); });
    std::jthread b([&] { sub = PlanSubscriber::Join(secret, dst_options); });
    spy_joined = spy.Join((*service)->address(), secret, spy_offer);
  }
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_TRUE(spy_joined.ok()) << spy_joined.ToString();

  // Version 1: the spy is a member; its key reads version 1.
  Fill(**pub, 1);
  ASSERT_TRUE((*pub)->Publish(1).ok());
  auto read = spy.TakeVersion(1);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, 1u);
  spy.Leave();
  ASSERT_TRUE((*pub)->Wait(1, kWait).ok());
  if (rotate) {
    // The verdict reaches the trainer only once the source has moved: the next version, written
    // from now on, is already out of the old key's reach.
    Status early = spy.Raw(false);
    EXPECT_FALSE(early.ok()) << "the old key still read the source after the verdict";
    EXPECT_NE(early.code(), StatusCode::kTimeout) << early.ToString();
  }

  // Version 2, committed by the others alone.
  ASSERT_TRUE((*pub)->WaitIdle(kWait).ok());
  Fill(**pub, 2);
  ASSERT_TRUE((*pub)->Publish(2).ok());
  Status second = (*pub)->Wait(2, kWait);
  ASSERT_TRUE(second.ok()) << second.ToString();
  ASSERT_TRUE((*sub)->WaitForVersion(2, kWait).ok());
  auto pin = (*sub)->Acquire();
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(VersionAt(pin->shard(0).data()), 2u);
  auto outcome = (*service)->WaitForOutcome(2, kWait);
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_TRUE(outcome->committed) << outcome->reason;

  // The spy's key from version 1, after version 2 was committed without it.
  Status get = spy.Raw(false);
  if (rotate) {
    EXPECT_FALSE(get.ok()) << "a Get with a dropped peer's key succeeded";
    EXPECT_NE(get.code(), StatusCode::kTimeout) << get.ToString();
    EXPECT_TRUE(spy.LandedNothing()) << "bytes of version " << spy.ReadVersion()
                                     << " reached the dropped peer";
    EXPECT_NE(get.message().find("src-0"), std::string::npos) << get.ToString();
    Status put = spy.Raw(true);
    EXPECT_FALSE(put.ok()) << "a Put with a dropped peer's key succeeded";
    EXPECT_NE(put.code(), StatusCode::kTimeout) << put.ToString();
    EXPECT_EQ(VersionAt((*pub)->shard(0).bytes.data()), 2u) << "the dropped peer's Put landed";
  } else {
    // Without rotation one key serves the whole session: the dropped peer reads version 2.
    ASSERT_TRUE(get.ok()) << get.ToString();
    EXPECT_EQ(spy.ReadVersion(), 2u);
  }
  pin->Release();
  (*service)->Stop();
  (*sub)->Close();
  (*pub)->Close();
}

INSTANTIATE_TEST_SUITE_P(Ucx, PlanKeyRevocation,
                         ::testing::Values(Param{"tcp", true}, Param{"shm", true}, Param{"tcp", false},
                                           Param{"shm", false}),
                         ParamName);

}  // namespace
}  // namespace weightport::plan_rekey_test
