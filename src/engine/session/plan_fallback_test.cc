// Fallback among source replicas in a plan session: a publisher that dies mid-version, after it
// announced the version, is stood in for by the replica that holds the same shards; the version
// commits on every subscriber bit-exact, and the next version, which needs every source, fails
// naming the lost one.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "plan_session_test_util.h"

namespace weightport {
namespace {

using namespace plan_session_test;

// The source a publisher is: its part names no other source.
Endpoint SourceOf(PlanPublisher& pub) {
  EXPECT_EQ(pub.plan().sources.size(), 1u);
  return pub.plan().sources.front().endpoint;
}

TEST(PlanFallback, APublisherLostMidVersionIsStoodInForByItsReplica) {
  const Endpoint dead{PlanSide::kSource, 0};
  std::map<Endpoint, std::shared_ptr<FaultPlan>> faults;
  for (int d = 0; d < 2; ++d) faults[{PlanSide::kDestination, d}] = std::make_shared<FaultPlan>(d + 1);
  Group g;
  g.faults = [&faults](Endpoint ep) {
    auto it = faults.find(ep);
    return it == faults.end() ? nullptr : it->second;
  };
  ASSERT_TRUE(g.Start(TwoReplicasToTwo()).ok());
  ASSERT_TRUE(g.PublishAll(1).ok());
  ASSERT_TRUE(g.WaitAll(1).ok());
  for (auto& s : g.subs) ASSERT_TRUE(s->WaitForVersion(1, milliseconds(10'000)).ok());

  // Version 2: every Get of the subscribers completes 300 ms after it is issued. Once each has
  // issued three (its one or two hash areas mirrored, and chunks or relay polls on their way), the
  // dead source's connections fail and its publisher closes: control and transport both gone.
  std::map<Endpoint, uint64_t> before;
  for (auto& [ep, plan] : faults) {
    before[ep] = plan->stats().ops;
    plan->set_delay({0, 1.0, kFaultGet}, milliseconds(300));
  }
  ASSERT_TRUE(g.PublishAll(2).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (auto& [ep, plan] : faults)
    while (plan->stats().ops < before[ep] + 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(1));
  PlanPublisher* survivor = nullptr;
  for (auto& p : g.pubs) {
    if (SourceOf(*p) != dead) {
      survivor = p.get();
      continue;
    }
    for (auto& [ep, plan] : faults) plan->KillPeer(dead.ToString());
    p->Close();
  }
  ASSERT_NE(survivor, nullptr);
  ASSERT_TRUE(survivor->Wait(2, milliseconds(10'000)).ok());
  uint64_t killed = 0;
  for (auto& [ep, plan] : faults) killed += plan->stats().killed;
  EXPECT_GT(killed, 0u);  // Gets to the dead source failed: what they were for came from the replica
  for (auto& s : g.subs) {
    ASSERT_TRUE(s->WaitForVersion(2, milliseconds(10'000)).ok());
    auto pin = s->Acquire();
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(pin->version(), 2u);
    EXPECT_TRUE(Check(*s, *pin).ok());
  }

  // The next version needs every source again: it fails, naming the lost one.
  ASSERT_TRUE(survivor->WaitIdle(milliseconds(10'000)).ok());
  Fill(*survivor, 3);
  ASSERT_TRUE(survivor->Publish(3).ok());
  Status v3 = survivor->Wait(3, milliseconds(10'000));
  ASSERT_FALSE(v3.ok());
  EXPECT_NE(v3.message().find("src rank 0"), std::string::npos) << v3.ToString();
  for (auto& s : g.subs) EXPECT_EQ(s->live_version(), 2u);
}

}  // namespace
}  // namespace weightport
