#include "weightport/core/rate_cap.h"

#include <gtest/gtest.h>

namespace weightport {
namespace {

using std::chrono::milliseconds;

TEST(RateCap, WithoutARateEverythingGoes) {
  RateCap none;
  EXPECT_FALSE(none.capped());
  EXPECT_FALSE(none.Admit(uint64_t{1} << 40, RateCap::Clock::now()));
  RateCap zero(0, RateCap::Clock::now());
  EXPECT_FALSE(zero.capped());
  EXPECT_FALSE(zero.Admit(uint64_t{1} << 40, RateCap::Clock::now()));
}

// Times are given, not read: the bucket is exact.
TEST(RateCap, OneRequestOfBurstThenTheRate) {
  const auto t0 = RateCap::Clock::time_point{} + std::chrono::hours(1);
  RateCap cap(1000, t0);  // 1000 bytes/s
  EXPECT_TRUE(cap.capped());
  EXPECT_FALSE(cap.Admit(500, t0));  // the burst: one request at the start
  // 500 more at t0 would be 1000 issued against 500 allowed: wait 0.5 s (and 1 ms of rounding).
  auto wait = cap.Admit(500, t0);
  ASSERT_TRUE(wait);
  EXPECT_EQ(*wait, milliseconds(501));
  EXPECT_TRUE(cap.Admit(500, t0 + milliseconds(400)));  // still early; nothing was counted
  EXPECT_FALSE(cap.Admit(500, t0 + milliseconds(500)));
  // 1000 issued by 0.5 s; 2000 in all may be by 1.5 s with a request of 500 as burst.
  EXPECT_TRUE(cap.Admit(1000, t0 + milliseconds(900)));
  EXPECT_FALSE(cap.Admit(1000, t0 + milliseconds(1000)));
}

// A request larger than the rate allows in a long while still goes at once when nothing is ahead of
// it (its own size is the burst), so a cap below one request per second never stalls a transfer.
TEST(RateCap, ALargeFirstRequestGoesAtOnce) {
  const auto t0 = RateCap::Clock::time_point{} + std::chrono::hours(1);
  RateCap cap(1, t0);
  EXPECT_FALSE(cap.Admit(uint64_t{1} << 30, t0));
  auto wait = cap.Admit(1, t0);
  ASSERT_TRUE(wait);
  EXPECT_GT(*wait, milliseconds(1000LL * (1 << 30)));
}

}  // namespace
}  // namespace weightport
