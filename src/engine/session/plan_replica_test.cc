// Replicas among the sources (DDP): their digests are compared before a version begins, and a
// version whose replicas differ is aborted, named, before any destination reads a byte of it.
#include <gtest/gtest.h>

#include "plan_session_test_util.h"

namespace weightport {
namespace {

using namespace plan_session_test;

TEST(PlanReplicas, SourcesWhoseReplicasDifferAbortTheVersionNamingTensorAndRanks) {
  Group g;
  ASSERT_TRUE(g.Start(TwoReplicasToTwo()).ok());
  ASSERT_TRUE(g.PublishAll(1).ok());
  ASSERT_TRUE(g.WaitAll(1).ok());

  // Version 2: one replica's 'w' drifted by one element.
  for (auto& p : g.pubs) {
    ASSERT_TRUE(p->WaitIdle(milliseconds(10'000)).ok());
    Fill(*p, 2);
  }
  PlanShardView w = g.pubs[1]->shard(0);
  ASSERT_EQ(w.tensor, "w");
  reinterpret_cast<float*>(w.bytes.data())[7] += 1.0f;
  for (auto& p : g.pubs) ASSERT_TRUE(p->Publish(2).ok());
  Status v2 = g.WaitAll(2);
  ASSERT_FALSE(v2.ok());
  EXPECT_NE(v2.message().find("replicas of version 2 differ: tensor 'w' [0:48, 0:40]: src rank 0 and src "
                              "rank 1 hold different bytes"),
            std::string::npos)
      << v2.ToString();
  EXPECT_EQ(v2.message().find("tensor 'b'"), std::string::npos) << v2.ToString();
  for (auto& s : g.subs) EXPECT_EQ(s->live_version(), 1u);

  // Replicas that agree again commit.
  ASSERT_TRUE(g.PublishAll(3).ok());
  ASSERT_TRUE(g.WaitAll(3).ok());
  for (auto& s : g.subs) {
    ASSERT_TRUE(s->WaitForVersion(3, milliseconds(10'000)).ok());
    auto pin = s->Acquire();
    ASSERT_TRUE(pin.ok());
    EXPECT_TRUE(Check(*s, *pin).ok());
  }
}

}  // namespace
}  // namespace weightport
