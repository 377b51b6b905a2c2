#include "weightport/engine/session/plan_service.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "engine/pubsub/pubsub_test_util.h"
#include "plan_session_test_util.h"
#include "weightport/engine/session/plan_member.h"
#include "weightport/engine/session/plan_publisher.h"
#include "weightport/engine/session/plan_subscriber.h"
#include "weightport/kernels/convert.h"
#include "weightport/plan/quantized.h"
#include "weightport/transport/testing/fake_transport.h"

namespace weightport {
namespace {

using std::chrono::milliseconds;
using namespace plan_session_test;

// A rank that authenticates and then says nothing must not hold up the offers behind it.
TEST(PlanRendezvous, AMuteConnectionDoesNotHoldUpTheOffersBehindIt) {
  auto listener = ControlListener::Listen("127.0.0.1", 0, "coord", TestSecret());
  ASSERT_TRUE(listener.ok());
  const std::string address = (*listener)->address();
  std::unique_ptr<ControlChannel> mute;
  std::vector<std::thread> ranks;
  std::thread peers([&] {
    auto m = ControlChannel::Connect(address, "mute", PeerRole::kObserver, TestSecret(), milliseconds(5000));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mute = std::move(*m);
    std::this_thread::sleep_for(milliseconds(200));  // the rendezvous waits for its offer
    for (const LayoutOffer& offer : TwoByTwo())
      ranks.emplace_back([&address, offer] {
        OfferLayout(address, TestSecret(), offer, milliseconds(10'000)).status().IgnoreError();
      });
  });
  RendezvousOptions o;
  o.timeout = milliseconds(10'000);
  const auto start = std::chrono::steady_clock::now();
  auto plan = CollectLayoutsAndPlan(**listener, o);
  const auto took = std::chrono::steady_clock::now() - start;
  peers.join();
  for (auto& t : ranks) t.join();
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_LT(took, milliseconds(2000)) << std::chrono::duration_cast<milliseconds>(took).count() << " ms";
}

TEST(PlanRendezvous, MergesOffersAndPlacesRanksOnTheirHosts) {
  RendezvousOptions o;
  auto plan = PlanFromOffers(TwoByTwo(), o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)->sources.size(), 2u);
  EXPECT_EQ((*plan)->destinations.size(), 2u);
  ASSERT_EQ((*plan)->topology.hosts().size(), 2u);
  EXPECT_EQ((*plan)->topology.hosts()[0].name, "trainer");
  EXPECT_EQ((*plan)->topology.hosts()[0].src_ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ((*plan)->topology.hosts()[1].dst_ranks, (std::vector<int>{0, 1}));
}

TEST(PlanRendezvous, DisagreementsAreNamed) {
  auto offers = TwoByTwo();
  offers[1] = Offer(PlanSide::kSource, 1, 2, "trainer", Slice::MakeBox({kRows / 2, 0}, {kRows / 2, kCols}),
                    DType::kBF16);
  auto plan = PlanFromOffers(offers, {});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("tensor 'w': src rank 1 says bf16"), std::string::npos)
      << plan.status().ToString();

  offers = TwoByTwo();
  offers.pop_back();
  plan = PlanFromOffers(offers, {});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("1 of 2 ranks offered"), std::string::npos)
      << plan.status().ToString();

  offers = TwoByTwo();
  offers[0].placement.AddShard(1, "b", Slice::MakeBox({0}, {kCols}));
  auto merged = MergeOffers({offers[0]});
  ASSERT_FALSE(merged.ok());
  EXPECT_NE(merged.status().message().find("src rank 0 offered shards for rank 1"), std::string::npos);
}

// Publishes versions 1..n and checks every subscriber pins each one bit-exact.
void PublishAndCheck(Group& g, uint64_t n) {
  for (uint64_t v = 1; v <= n; ++v) {
    ASSERT_TRUE(g.PublishAll(v).ok());
    ASSERT_TRUE(g.WaitAll(v).ok()) << g.WaitAll(v).ToString();
    for (auto& s : g.subs) {
      ASSERT_TRUE(s->WaitForVersion(v, milliseconds(10'000)).ok());
      auto pin = s->Acquire();
      ASSERT_TRUE(pin.ok());
      EXPECT_EQ(pin->version(), v);
      EXPECT_TRUE(Check(*s, *pin).ok()) << Check(*s, *pin).ToString();
    }
  }
}

// A subscriber storing the tensors as e4m3: the source quantises them; each shard's view says where
// its block scales are, and the bytes there are the kernel's, for every version.
TEST(PlanSession, AQuantisedShardSaysWhereItsScalesAre) {
  Group g;
  const Slice whole = Slice::MakeBox({0, 0}, {kRows, kCols});
  ASSERT_TRUE(g.Start({Offer(PlanSide::kSource, 0, 1, "trainer", whole),
                       Offer(PlanSide::kDestination, 0, 1, "server", whole, DType::kF8E4M3)})
                  .ok())
      << g.errors.front().ToString();
  EXPECT_FALSE(g.pubs[0]->shard(0).quantized);
  for (uint64_t v = 1; v <= 2; ++v) {
    ASSERT_TRUE(g.PublishAll(v).ok());
    ASSERT_TRUE(g.WaitAll(v).ok());
    PlanSubscriber& sub = *g.subs[0];
    ASSERT_TRUE(sub.WaitForVersion(v, milliseconds(10'000)).ok());
    auto pin = sub.Acquire();
    ASSERT_TRUE(pin.ok());
    for (size_t i = 0; i < sub.num_shards(); ++i) {
      const PlanShardView s = sub.shard_info(i);
      ASSERT_TRUE(s.quantized) << s.tensor;
      EXPECT_EQ(s.dtype, DType::kF8E4M3);
      auto m = QuantizedMatrixOf(s.slice, s.shape, kernels::Fp8Scaling::kBlock128);
      ASSERT_TRUE(m.ok());
      std::vector<float> values(static_cast<size_t>(m->rows * m->cols));
      ForEachElement(s, [&](size_t k, int64_t flat) { values[k] = Value(s.tensor, flat, v); });
      std::vector<uint8_t> want(values.size());
      std::vector<float> scales(static_cast<size_t>(m->scales));
      ASSERT_TRUE(kernels::QuantizeE4m3(DType::kF32, values.data(), m->rows, m->cols,
                                        kernels::Fp8Scaling::kBlock128, want.data(), scales.data())
                      .ok());
      EXPECT_EQ(s.scale_blocks.num_elements(), m->scales);
      EXPECT_EQ(s.scale_offset % 4, 0u);
      const std::span<const std::byte> got = pin->shard(i);
      ASSERT_EQ(got.size(), s.scale_offset + 4 * scales.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << s.tensor << " version " << v;
      EXPECT_EQ(std::memcmp(got.data() + s.scale_offset, scales.data(), 4 * scales.size()), 0) << s.tensor;
    }
  }
}

TEST(PlanSession, RotatingKeysEveryRankMovesAfterEachVersionAndVersionsStayBitExact) {
  Group g;
  g.rotate_keys = true;
  ASSERT_TRUE(g.Start(TwoByTwo()).ok()) << g.errors.front().ToString();
  ASSERT_NO_FATAL_FAILURE(PublishAndCheck(g, 3));
  ASSERT_TRUE(g.service->WaitForOutcome(3, milliseconds(10'000)).ok());
  for (const auto& o : g.service->outcomes()) {
    EXPECT_TRUE(o.committed) << o.reason;
    EXPECT_GT(o.rekey_seconds, 0) << "version " << o.version << " was not followed by a rekey";
  }
  g.service->Stop();
  for (auto& s : g.subs) EXPECT_TRUE(s->session_status().ok()) << s->session_status().ToString();
}

// A relay that leaves: the coordinator loses it (quorum), and the rekey round's table no longer
// names it. The rank it relayed for connects to the others, routes around it and gets every later
// version from the sources, bit-exact.
TEST(PlanSession, RotatingKeysARelayThatLeavesIsRoutedAroundUnderAQuorum) {
  Group g;
  g.rotate_keys = true;
  g.quorum = 1;
  ASSERT_TRUE(g.Start(TwoByTwo()).ok()) << g.errors.front().ToString();
  ASSERT_NO_FATAL_FAILURE(PublishAndCheck(g, 1));
  int relay = -1;
  for (const PlanStep& step : g.service->plan()->steps)
    if (step.from.side == PlanSide::kDestination) relay = step.from.rank;
  ASSERT_GE(relay, 0) << "the plan has no relay";
  // The relay's shards (the whole of "w" and "b") are its own alone here.
  auto is_relay = [&](const std::unique_ptr<PlanSubscriber>& s) {
    const RankBuffer& b = *g.service->plan()->Buffer({PlanSide::kDestination, relay});
    if (s->num_shards() != b.shards.size()) return false;
    for (size_t i = 0; i < b.shards.size(); ++i)
      if (!(s->shard_info(i).slice == b.shards[i].slice)) return false;
    return true;
  };
  std::erase_if(g.subs, [&](auto& s) {
    if (!is_relay(s)) return false;
    s->Close();
    return true;
  });
  ASSERT_EQ(g.subs.size(), 1u);
  for (uint64_t v = 2; v <= 3; ++v) {
    ASSERT_TRUE(g.PublishAll(v).ok());
    ASSERT_TRUE(g.WaitAll(v).ok()) << g.WaitAll(v).ToString();
    ASSERT_TRUE(g.subs[0]->WaitForVersion(v, milliseconds(10'000)).ok());
    auto pin = g.subs[0]->Acquire();
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(pin->version(), v);
    EXPECT_TRUE(Check(*g.subs[0], *pin).ok()) << Check(*g.subs[0], *pin).ToString();
  }
  auto third = g.service->WaitForOutcome(3, milliseconds(10'000));
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_TRUE(third->committed) << third->reason;
  EXPECT_EQ(third->dropped, (std::vector<std::string>{"dst rank " + std::to_string(relay) + " is lost"}));
  g.service->Stop();
  EXPECT_TRUE(g.subs[0]->session_status().ok()) << g.subs[0]->session_status().ToString();
}

// Ranks created to rotate keys under a coordinator that does not: a source holds each verdict for
// the Rekey that never comes, and the trainer's wait says so instead of timing out unexplained.
TEST(PlanSession, RanksThatRotateUnderACoordinatorThatDoesNotAreToldWhy) {
  Group g;
  g.rotate_keys = true;
  g.service_rotates = false;
  ASSERT_TRUE(g.Start(TwoByTwo()).ok()) << g.errors.front().ToString();
  ASSERT_TRUE(g.PublishAll(1).ok());
  ASSERT_TRUE(g.service->WaitForOutcome(1, milliseconds(10'000)).ok());
  Status s = g.pubs[0]->Wait(1, milliseconds(500));
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
  EXPECT_NE(s.message().find("sent no Rekey"), std::string::npos) << s.ToString();
  g.service->Stop();
}

TEST(PlanSession, VersionsReachEverySubscriberBitExact) {
  Group g;
  ASSERT_TRUE(g.Start(TwoByTwo()).ok()) << g.errors.front().ToString();
  ASSERT_NO_FATAL_FAILURE(PublishAndCheck(g, 3));
  ASSERT_TRUE(g.service->WaitForOutcome(3, milliseconds(10'000)).ok());
  auto outcomes = g.service->outcomes();
  ASSERT_EQ(outcomes.size(), 3u);
  for (const auto& o : outcomes) EXPECT_TRUE(o.committed) << o.reason;
  g.service->Stop();
  for (auto& s : g.subs) {
    EXPECT_EQ(s->WaitForVersion(4, milliseconds(10'000)).code(), StatusCode::kCancelled);
    EXPECT_TRUE(s->session_status().ok()) << s->session_status().ToString();
  }
}

// A reader pinned to version 1 keeps it intact; version 3 would land in that copy, so it waits for
// the pin, times out and is aborted everywhere; once released, version 4 commits.
TEST(PlanSession, APinKeepsItsVersionAndAnUpdateThatNeedsItsCopyIsAborted) {
  Group g;
  ASSERT_TRUE(g.Start(TwoByTwo(), milliseconds(300)).ok());
  ASSERT_TRUE(g.PublishAll(1).ok());
  ASSERT_TRUE(g.WaitAll(1).ok());
  PlanSubscriber& sub = *g.subs[0];
  ASSERT_TRUE(sub.WaitForVersion(1, milliseconds(10'000)).ok());
  auto pin = sub.Acquire();
  ASSERT_TRUE(pin.ok());
  ASSERT_TRUE(g.PublishAll(2).ok());
  ASSERT_TRUE(g.WaitAll(2).ok());
  ASSERT_TRUE(g.PublishAll(3).ok());
  Status third = g.WaitAll(3);
  EXPECT_EQ(third.code(), StatusCode::kUnavailable);
  EXPECT_NE(third.message().find("readers still hold version 1"), std::string::npos) << third.ToString();
  EXPECT_TRUE(Check(sub, *pin).ok());
  EXPECT_EQ(pin->version(), 1u);
  pin->Release();
  ASSERT_TRUE(g.PublishAll(4).ok());
  ASSERT_TRUE(g.WaitAll(4).ok());
  ASSERT_TRUE(sub.WaitForVersion(4, milliseconds(10'000)).ok());
  auto fresh = sub.Acquire();
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->version(), 4u);
  EXPECT_TRUE(Check(sub, *fresh).ok());
}

TEST(PlanSession, ARankWhoseLayoutDisagreesIsRefusedAndSoAreTheOthers) {
  auto offers = TwoByTwo();
  offers[3] =
      Offer(PlanSide::kDestination, 1, 2, "server", Slice::MakeBox({0, 0}, {kRows, kCols}), DType::kF16);
  offers[3].placement = *Placement::Make({*TensorMeta::Make("w", DType::kF32, {kRows, kCols + 1})});
  offers[3].placement.AddShard(1, "w", Slice::MakeBox({0, 0}, {kRows, kCols + 1}));
  Group g;
  Status s = g.Start(offers);
  ASSERT_EQ(g.errors.size(), 4u);
  for (const Status& e : g.errors) {
    EXPECT_EQ(e.code(), StatusCode::kPermissionDenied) << e.ToString();
    EXPECT_NE(e.message().find("tensor 'w'"), std::string::npos) << e.ToString();
  }
  auto ended = g.service->WaitForOutcome(1, milliseconds(10'000));
  ASSERT_FALSE(ended.ok());
  EXPECT_NE(ended.status().message().find("tensor 'w'"), std::string::npos) << ended.status().ToString();
  EXPECT_FALSE(g.service->error().ok());
}

}  // namespace
}  // namespace weightport
