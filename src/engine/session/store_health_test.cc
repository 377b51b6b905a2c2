#include "weightport/engine/session/store_health.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace weightport {
namespace {

TEST(StoreHealthTest, AFailureIsLoggedAtOnceThenRateLimitedWithTheCount) {
  Metrics metrics;
  std::vector<std::string> lines;
  StoreHealth health(
      "etcd://127.0.0.1:1", &metrics, [&](std::string l) { lines.push_back(std::move(l)); },
      std::chrono::hours(1));
  EXPECT_EQ(metrics.Value(kStoreReachableMetric, {}), 0);
  for (int i = 0; i < 100; ++i) health.Failed("campaigning", Unavailable("cannot connect: refused"));
  ASSERT_EQ(lines.size(), 1u);  // the rest fall inside the interval
  EXPECT_NE(lines[0].find("store etcd://127.0.0.1:1 campaigning: Unavailable: cannot connect"),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(metrics.Value(kStoreErrorsMetric, {}), 100);
  EXPECT_EQ(health.state().errors, 100u);
  EXPECT_FALSE(health.state().reachable);

  health.Answered();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("answers again"), std::string::npos);
  EXPECT_EQ(metrics.Value(kStoreReachableMetric, {}), 1);
  health.Failed("campaigning", Timeout("no answer"));  // news again after an answer
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[2].find("Timeout: no answer"), std::string::npos);
}

TEST(StoreHealthTest, EveryFailureIsLoggedWithoutAnIntervalAndCountsTheSkipped) {
  std::vector<std::string> lines;
  StoreHealth every(
      "etcd://h:1", nullptr, [&](std::string l) { lines.push_back(std::move(l)); },
      std::chrono::milliseconds(0));
  for (int i = 0; i < 3; ++i) every.Failed("reading", Unavailable("HTTP 500"));
  EXPECT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2].find("failures since"), std::string::npos);
}

TEST(StoreHealthTest, AHostileMessageIsLoggedPrintable) {
  std::vector<std::string> lines;
  StoreHealth health("etcd://h:1", nullptr, [&](std::string l) { lines.push_back(std::move(l)); });
  health.Failed("campaigning", Unavailable("x\n{\"event\":\"version\"}\x1b[2J"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].find('\n'), std::string::npos);
  EXPECT_EQ(lines[0].find('\x1b'), std::string::npos);
}

TEST(StoreHealthTest, LeadingIsAGauge) {
  Metrics metrics;
  StoreHealth health("etcd://h:1", &metrics, nullptr);
  health.SetLeading(true);
  EXPECT_EQ(metrics.Value(kLeadingMetric, {}), 1);
  health.SetLeading(false);
  EXPECT_EQ(metrics.Value(kLeadingMetric, {}), 0);
}

}  // namespace
}  // namespace weightport
