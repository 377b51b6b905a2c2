// Fleet rollback in a plan session: a source asks for a version committed before, every subscriber
// restores the copy it kept, and the version is live everywhere or nowhere.
#include <gtest/gtest.h>

#include "plan_session_test_util.h"

namespace weightport {
namespace {

using namespace plan_session_test;

// The coordinator lists an outcome once every subscriber swapped; the sources hear it a little before.
void ExpectLiveEverywhere(Group& g, uint64_t v) {
  for (auto& s : g.subs) {
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(10'000);
    while (s->live_version() != v && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(2));
    EXPECT_EQ(s->live_version(), v);
    auto pin = s->Acquire();
    ASSERT_TRUE(pin.ok()) << pin.status().ToString();
    EXPECT_EQ(pin->version(), v);
    Status bytes = Check(*s, *pin);
    EXPECT_TRUE(bytes.ok()) << bytes.ToString();
  }
}

TEST(PlanRollback, EverySubscriberGoesBackToAKeptVersionAndVersionsGoOn) {
  Group g;
  g.keep_versions = 2;
  ASSERT_TRUE(g.Start(TwoByTwo()).ok());
  for (uint64_t v = 1; v <= 4; ++v) {
    ASSERT_TRUE(g.PublishAll(v).ok());
    ASSERT_TRUE(g.WaitAll(v).ok());
  }
  ExpectLiveEverywhere(g, 4);
  for (auto& s : g.subs) EXPECT_EQ(s->kept_versions(), (std::vector<uint64_t>{3, 4}));
  const size_t before = g.service->outcomes().size();
  Status rolled = g.pubs[0]->Rollback(3, milliseconds(10'000));
  ASSERT_TRUE(rolled.ok()) << rolled.ToString();
  auto outcome = g.service->WaitForOutcome(3, milliseconds(10'000), true, before);
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_TRUE(outcome->committed);
  EXPECT_TRUE(outcome->rollback);
  EXPECT_EQ(outcome->bytes, 0u);  // nothing crossed a link
  ExpectLiveEverywhere(g, 3);
  // The other source heard the verdict too and publishes on.
  ASSERT_TRUE(g.PublishAll(5).ok());
  ASSERT_TRUE(g.WaitAll(5).ok());
  ExpectLiveEverywhere(g, 5);
  // A version is never published twice: the numbering goes on past the rollback.
  EXPECT_EQ(g.pubs[0]->Publish(4).code(), StatusCode::kInvalidArgument);
}

TEST(PlanRollback, AVersionOneSubscriberNoLongerKeepsIsRolledBackNowhere) {
  Group g;
  g.keep_versions = 1;
  ASSERT_TRUE(g.Start(TwoByTwo()).ok());
  for (uint64_t v = 1; v <= 3; ++v) {
    ASSERT_TRUE(g.PublishAll(v).ok());
    ASSERT_TRUE(g.WaitAll(v).ok());
  }
  Status rolled = g.pubs[1]->Rollback(2, milliseconds(10'000));
  ASSERT_FALSE(rolled.ok());
  EXPECT_EQ(rolled.code(), StatusCode::kUnavailable);
  EXPECT_NE(rolled.message().find("does not keep version 2"), std::string::npos) << rolled.ToString();
  ExpectLiveEverywhere(g, 3);
  // Nothing half done: the next version lands as usual.
  ASSERT_TRUE(g.PublishAll(4).ok());
  ASSERT_TRUE(g.WaitAll(4).ok());
  ExpectLiveEverywhere(g, 4);
}

TEST(PlanRollback, AReaderOfTheCopyARollbackNeedsMakesItFailEverywhere) {
  Group g;
  g.keep_versions = 2;
  ASSERT_TRUE(g.Start(TwoByTwo(), milliseconds(200)).ok());
  for (uint64_t v = 1; v <= 2; ++v) {
    ASSERT_TRUE(g.PublishAll(v).ok());
    ASSERT_TRUE(g.WaitAll(v).ok());
  }
  // A reader holds version 1's copy, which the rollback to 1 must be restored into.
  ASSERT_TRUE(g.PublishAll(3).ok());
  ASSERT_TRUE(g.WaitAll(3).ok());
  ExpectLiveEverywhere(g, 3);
  auto pin = g.subs[0]->Acquire();  // version 3: the copy a restore writes is version 2's
  ASSERT_TRUE(pin.ok());
  Status free = g.pubs[0]->Rollback(2, milliseconds(10'000));  // its copy is free: fine
  ASSERT_TRUE(free.ok()) << free.ToString();
  ExpectLiveEverywhere(g, 2);
  // Now the pinned version 3 sits in the copy a restore would write: refused, everywhere.
  Status rolled = g.pubs[0]->Rollback(3, milliseconds(10'000));
  ASSERT_FALSE(rolled.ok());
  EXPECT_NE(rolled.message().find("readers still hold version 3"), std::string::npos) << rolled.ToString();
  pin->Release();
  ExpectLiveEverywhere(g, 2);
  ASSERT_TRUE(g.pubs[0]->Rollback(3, milliseconds(10'000)).ok());
  ExpectLiveEverywhere(g, 3);
}

}  // namespace
}  // namespace weightport
