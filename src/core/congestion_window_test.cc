#include "weightport/core/congestion_window.h"

#include <gtest/gtest.h>

namespace weightport {
namespace {

using std::chrono::milliseconds;

TEST(CongestionWindow, StartsFullAndNeverBelowOne) {
  CongestionWindow zero({.max = 0});
  EXPECT_EQ(zero.size(), 1u);
  CongestionWindow w({.max = 8});
  EXPECT_EQ(w.size(), 8u);
  for (int i = 0; i < 100; ++i) {
    w.OnLost();
    for (size_t k = 0; k < 8; ++k) w.OnLost();  // the rest of the window: no further cut
  }
  EXPECT_EQ(w.size(), 1u);
  EXPECT_EQ(w.min_size(), 1u);
}

// Losses among the requests in flight together are one event: one cut per window of completions
// (a lost request completes too).
TEST(CongestionWindow, OneCutPerWindowOfCompletions) {
  CongestionWindow w({.max = 16});
  w.OnLost();
  EXPECT_EQ(w.size(), 8u);
  for (int i = 0; i < 8; ++i) w.OnLost();  // the same window
  EXPECT_EQ(w.size(), 8u);
  EXPECT_EQ(w.loss_cuts(), 1u);
  w.OnLost();  // a window later
  EXPECT_EQ(w.size(), 4u);
  EXPECT_EQ(w.loss_cuts(), 2u);
  EXPECT_EQ(w.min_size(), 4u);
}

TEST(CongestionWindow, GrowsByOnePerWindowWithoutCongestionUpToItsMax) {
  CongestionWindow w({.max = 4});
  w.OnLost();
  ASSERT_EQ(w.size(), 2u);
  w.OnCompleted(milliseconds(1));
  EXPECT_EQ(w.size(), 2u);
  w.OnCompleted(milliseconds(1));  // a window of 2 completions
  EXPECT_EQ(w.size(), 3u);
  for (int i = 0; i < 3; ++i) w.OnCompleted(milliseconds(1));
  EXPECT_EQ(w.size(), 4u);
  for (int i = 0; i < 100; ++i) w.OnCompleted(milliseconds(1));
  EXPECT_EQ(w.size(), 4u);
  EXPECT_EQ(w.min_size(), 2u);
}

// A request slow against the fastest seen (and by more than the floor) is a sign of queueing; a
// slow one within the floor, or with delay unwatched, is not.
TEST(CongestionWindow, DelayCutsOnlyWhenWatchedAndPastTheFloor) {
  CongestionWindow watched({.max = 8, .delay_factor = 2, .delay_floor = milliseconds(2)});
  watched.OnCompleted(milliseconds(1));
  watched.OnCompleted(milliseconds(2));  // 2x the fastest, not more
  EXPECT_EQ(watched.size(), 8u);
  watched.OnCompleted(milliseconds(3));  // 3x, but only 2 ms over: within the floor
  EXPECT_EQ(watched.size(), 8u);
  watched.OnCompleted(milliseconds(10));
  EXPECT_EQ(watched.size(), 4u);
  EXPECT_EQ(watched.delay_cuts(), 1u);
  EXPECT_EQ(watched.loss_cuts(), 0u);

  CongestionWindow unwatched({.max = 8});
  unwatched.OnCompleted(milliseconds(1));
  unwatched.OnCompleted(milliseconds(1000));
  EXPECT_EQ(unwatched.size(), 8u);
  EXPECT_EQ(unwatched.delay_cuts(), 0u);
}

}  // namespace
}  // namespace weightport
