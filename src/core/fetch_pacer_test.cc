#include "weightport/core/fetch_pacer.h"

#include <gtest/gtest.h>

namespace weightport {
namespace {

using Clock = FetchPacer::Clock;
using std::chrono::milliseconds;

constexpr uint64_t kPacedChunk = 1 << 20;

TEST(FetchPacer, NormalPriorityWithoutACapLetsEverythingGo) {
  const Clock::time_point t0{};
  FetchPacer pacer(0, t0, nullptr);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(pacer.Admit(kPacedChunk, t0).has_value());
  EXPECT_EQ(pacer.Window(32), 32u);
  EXPECT_FALSE(pacer.OnCompleted(kPacedChunk, t0, t0 + milliseconds(5)));
}

TEST(FetchPacer, AFixedCapHoldsTheRequestPastItsBurst) {
  const Clock::time_point t0{};
  FetchPacer pacer(kPacedChunk, t0, nullptr);  // a chunk a second
  EXPECT_FALSE(pacer.Admit(kPacedChunk, t0).has_value());
  const auto wait = pacer.Admit(kPacedChunk, t0);
  ASSERT_TRUE(wait.has_value());
  EXPECT_GE(*wait, milliseconds(999));
  EXPECT_FALSE(pacer.Admit(kPacedChunk, t0 + milliseconds(1000)).has_value());
}

// Queued requests served twice as slowly as before: it begins to yield, says so once, and holds
// to its share of the base rate; a request served alone at the base rate again frees it.
TEST(FetchPacer, WhileYieldingABucketHoldsToTheShareKeptAndIsDroppedAfter) {
  auto background = std::make_shared<BackgroundYield>(BackgroundYield::Options{.share = 0.1});
  const Clock::time_point t0{};
  FetchPacer pacer(0, t0, background);
  EXPECT_EQ(pacer.Window(32), BackgroundYield::kFirstWindow);
  Clock::time_point now = t0;
  int began = 0;
  // Each issued before the previous one completed: 10 ms per chunk, then 20 ms.
  for (int i = 0; i < 10; ++i) {
    const Clock::time_point done = now + milliseconds(i < 5 ? 10 : 20);
    began += pacer.OnCompleted(kPacedChunk, now - milliseconds(1), done) ? 1 : 0;
    now = done;
  }
  ASSERT_TRUE(background->yielding());
  EXPECT_EQ(began, 1);
  // The share: a tenth of 100 chunks a second, so one chunk per 100 ms after a chunk of burst.
  EXPECT_FALSE(pacer.Admit(kPacedChunk, now).has_value());
  const auto wait = pacer.Admit(kPacedChunk, now);
  ASSERT_TRUE(wait.has_value());
  EXPECT_GE(*wait, milliseconds(99));
  EXPECT_LE(*wait, milliseconds(101));
  // Served alone (issued after the last completion) at the base rate: free, and nothing held.
  EXPECT_FALSE(pacer.OnCompleted(kPacedChunk, now + milliseconds(1), now + milliseconds(12)));
  ASSERT_FALSE(background->yielding());
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(pacer.Admit(kPacedChunk, now + milliseconds(12)).has_value());
}

}  // namespace
}  // namespace weightport
