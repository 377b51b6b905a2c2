// A reader reading continuously through 100 consecutive updates never sees a mix of versions, in
// every swap mode: each version's content identifies it (pubsub_test_util.h) and every read is checked.
#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "pubsub_test_util.h"

namespace weightport {
namespace {

using namespace engine_test;

class TornRead : public ::testing::TestWithParam<SwapMode> {};

TEST_P(TornRead, ReaderNeverSeesAMixOfVersionsOverOneHundredUpdates) {
  constexpr uint64_t kVersions = 100;
  Cluster c;
  auto pub = c.MakePublisher(SmallModel());
  auto sub = c.MakeSubscriber(*pub, "reader-host", nullptr, GetParam());
  ASSERT_TRUE(pub->coordinator()->WaitForSubscribers(1, kWait).ok());

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, torn{0}, went_back{0}, last_seen{0};
  std::thread reader([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!stop.load() && std::chrono::steady_clock::now() < deadline) {
      auto pin = sub->Acquire();
      if (!pin.ok()) continue;  // before the first commit; in-place blocks readers (Timeout is fine too)
      const uint64_t v = VersionOf(pin->bytes());
      reads.fetch_add(1);
      if (v != pin->version()) torn.fetch_add(1);
      if (v < last_seen.load()) went_back.fetch_add(1);
      last_seen.store(v);
    }
  });
  for (uint64_t v = 1; v <= kVersions; ++v) {
    FillVersion(*pub, v);
    auto r = pub->Publish(v, PublishMode::kLive);
    ASSERT_TRUE(r.ok() && r->outcome.ok())
        << "version " << v << ": " << (r.ok() ? r->outcome.ToString() : r.status().ToString());
    ASSERT_TRUE(sub->WaitForVersion(v, kWait).ok());
  }
  // Let the reader see the last version a few times.
  const uint64_t before = reads.load();
  for (int i = 0; i < 200 && reads.load() < before + 10; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop.store(true);
  reader.join();
  EXPECT_GT(reads.load(), kVersions / 2) << "the reader barely ran";
  EXPECT_EQ(torn.load(), 0u) << "reads that mixed versions, of " << reads.load();
  EXPECT_EQ(went_back.load(), 0u);
  EXPECT_EQ(last_seen.load(), kVersions);
}

INSTANTIATE_TEST_SUITE_P(SwapModes, TornRead,
                         ::testing::Values(SwapMode::kDoubleBuffer, SwapMode::kStageThenCopy,
                                           SwapMode::kInPlace),
                         [](const auto& info) {
                           std::string name(SwapModeName(info.param));
                           std::erase(name, '-');
                           return name;
                         });

}  // namespace
}  // namespace weightport
