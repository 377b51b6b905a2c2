#include "weightport/core/background_yield.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>

namespace weightport {
namespace {

using Clock = BackgroundYield::Clock;
using Seconds = std::chrono::duration<double>;

constexpr uint64_t kChunk = 1 << 20;

// A FIFO bottleneck of `rate` bytes/s with a round trip of `rtt` s, shared from `other_from` to
// `other_until` (s) with other traffic that leaves this transfer `other_share_left` of it. A
// transfer keeps `window` requests in flight, or, while its BackgroundYield yields, issues one at
// a time at the rate it says. Everything is simulated time: no clock is read.
struct Path {
  double rate = 12.5e6;  // 100 Mbit/s
  double rtt = 0.0002;
  double other_from = 1e9, other_until = 1e9;
  double other_share_left = 0.5;
  size_t window = 8;
};

struct Outcome {
  double bytes_while_other = 0;  // this transfer's bytes served while the other traffic ran
  double yielded_at = -1;        // first time it was yielding (s), -1: never
  double resumed_at = -1;        // first time it ran free again after yielding
  double finished_at = 0;
};

Outcome Simulate(BackgroundYield& yield, const Path& p, uint64_t requests) {
  const Clock::time_point t0{};
  auto at = [&](double s) { return t0 + std::chrono::duration_cast<Clock::duration>(Seconds(s)); };
  Outcome run;
  double link_free = 0, last_issue = -1e9;
  std::deque<std::pair<double, double>> in_flight;  // (issued, done), done in order (FIFO)
  uint64_t issued = 0;
  double now = 0;
  while (issued < requests || !in_flight.empty()) {
    // Issue what the window, or the yield's rate, lets go now.
    while (issued < requests) {
      if (yield.yielding()) {
        const double next = last_issue + static_cast<double>(kChunk) / yield.rate();
        if (!in_flight.empty() || next > now) break;
      } else if (in_flight.size() >= yield.window(p.window)) {
        break;
      }
      const double arrive = now + p.rtt / 2;
      const double start = std::max(arrive, link_free);
      const bool other = start >= p.other_from && start < p.other_until;
      const double served = static_cast<double>(kChunk) / (p.rate * (other ? p.other_share_left : 1.0));
      link_free = start + served;
      if (other) run.bytes_while_other += static_cast<double>(kChunk);
      in_flight.emplace_back(now, link_free + p.rtt / 2);
      last_issue = now;
      ++issued;
    }
    // Advance to the next completion, or to the next paced issue when none is in flight.
    if (in_flight.empty()) {
      now = last_issue + static_cast<double>(kChunk) / yield.rate();
      continue;
    }
    const auto [when_issued, done] = in_flight.front();
    in_flight.pop_front();
    now = done;
    const bool was = yield.yielding();
    yield.OnCompleted(kChunk, at(when_issued), at(done));
    if (!was && yield.yielding() && run.yielded_at < 0) run.yielded_at = now;
    if (was && !yield.yielding() && run.resumed_at < 0) run.resumed_at = now;
  }
  run.finished_at = now;
  return run;
}

TEST(BackgroundYield, RunsFreeOnAPathOfItsOwn) {
  BackgroundYield yield;
  const Outcome run = Simulate(yield, Path{}, 200);
  EXPECT_EQ(yield.yields(), 0u);
  EXPECT_FALSE(yield.yielding());
  // At the path's rate: 200 MiB at 100 Mbit/s, 16.8 s.
  EXPECT_NEAR(run.finished_at, 200.0 * kChunk / 12.5e6, 0.1);
  EXPECT_NEAR(yield.base_rate(), 12.5e6, 12.5e6 * 0.01);
  EXPECT_EQ(yield.rate(), 0.0);
}

TEST(BackgroundYield, YieldsWhileOtherTrafficSharesThePathAndRunsFreeAfter) {
  BackgroundYield yield;
  Path p;
  p.other_from = 4.0;
  p.other_until = 10.0;
  const Outcome run = Simulate(yield, p, 200);
  EXPECT_EQ(yield.yields(), 1u);
  // It saw the other traffic within a window and two requests of its start...
  ASSERT_GT(run.yielded_at, p.other_from);
  EXPECT_LT(run.yielded_at, p.other_from + 5 * (2 * kChunk / 12.5e6));
  // ...and the end of it with the first request served alone after it (1/0.05 chunk times apart).
  ASSERT_GT(run.resumed_at, p.other_until);
  EXPECT_LT(run.resumed_at, p.other_until + kChunk / (0.05 * 12.5e6) + 0.5);
  // Over the 6 s of other traffic it took at most its share and what was in flight when it began:
  // without yielding it would have had half the link, 37.5 MB.
  const double fair = 0.5 * 12.5e6 * 6.0;
  EXPECT_LT(run.bytes_while_other, 0.25 * fair);
  EXPECT_FALSE(yield.yielding());
}

TEST(BackgroundYield, YieldingHoldsToItsShareOfTheBaseRate) {
  BackgroundYield yield({.share = 0.1});
  Path p;
  p.other_from = 2.0;
  p.other_until = 1e9;  // never leaves
  Simulate(yield, p, 60);
  ASSERT_TRUE(yield.yielding());
  EXPECT_DOUBLE_EQ(yield.rate(), 0.1 * yield.base_rate());
}

TEST(BackgroundYield, OneSlowRequestIsNotASignTwoInARowAre) {
  BackgroundYield yield;
  const Clock::time_point t0{};
  auto at = [&](double ms) { return t0 + std::chrono::microseconds(static_cast<int64_t>(ms * 1000)); };
  // Each issued before the previous completed (queued behind it), served in 10 ms; request 20
  // takes 40 ms, and later 30 and 31 do.
  double now = 0;
  for (int i = 0; i < 40; ++i) {
    const double took = i == 20 || i == 30 || i == 31 ? 40 : 10;
    yield.OnCompleted(kChunk, at(now - 1), at(now + took));
    now += took;
    if (i < 31) EXPECT_EQ(yield.yields(), 0u) << i;
  }
  EXPECT_EQ(yield.yields(), 1u);
}

// On a long round trip a request that goes alone takes the round trip more than a queued one:
// measured against requests that went alone, it still sees the others leave.
TEST(BackgroundYield, ResumesOnALongRoundTrip) {
  BackgroundYield yield;
  Path p;
  p.rate = 125e6;  // 1 Gbit/s: a chunk in 8.4 ms
  p.rtt = 0.02;    // 20 ms
  p.window = 16;
  p.other_from = 1.0;
  p.other_until = 3.0;
  const Outcome run = Simulate(yield, p, 400);
  EXPECT_EQ(yield.yields(), 1u) << run.yielded_at << " " << run.resumed_at << " " << run.finished_at;
  EXPECT_GT(run.resumed_at, p.other_until);
  EXPECT_FALSE(yield.yielding());
}

// The window never exceeds what the caller allows, even below the two it keeps otherwise.
TEST(BackgroundYield, TheWindowStaysWithinTheMostGiven) {
  BackgroundYield yield;
  Simulate(yield, Path{}, 20);
  EXPECT_EQ(yield.window(1), 1u);
  EXPECT_EQ(yield.window(32), 2u);  // a 100 Mbit/s path, a 0.2 ms round trip: two keep it busy
}

}  // namespace
}  // namespace weightport
