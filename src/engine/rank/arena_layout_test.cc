#include "arena_layout.h"

#include <gtest/gtest.h>

#include <array>
#include <stdexcept>
#include <utility>
#include <vector>

#include "plan_rank_impl.h"

namespace weightport::arena_layout {
namespace {

using plan_rank_internal::HashAreaCheck;
using plan_rank_internal::LoadCounter;
using plan_rank_internal::StoreCounter;

// The layout tables are flat: appended in step order, found by binary search, and kept in order
// whatever order they are set in (the counters' are set in order of first use).
TEST(StepMap, KeepsStepOrderAndFindsEachEntry) {
  StepMap m;
  for (uint32_t step : {3u, 7u, 9u}) m.Set(step, step * 10);
  m.Set(5, 50);  // out of order: inserted
  m.Set(7, 71);  // again: overwritten
  ASSERT_EQ(m.size(), 4u);
  std::vector<std::pair<uint32_t, uint64_t>> in_order(m.begin(), m.end());
  EXPECT_EQ(in_order, (std::vector<std::pair<uint32_t, uint64_t>>{{3, 30}, {5, 50}, {7, 71}, {9, 90}}));
  EXPECT_EQ(m.at(5), 50u);
  EXPECT_TRUE(m.count(9));
  EXPECT_FALSE(m.count(4));
  EXPECT_EQ(m.Find(10), nullptr);
  EXPECT_THROW(m.at(0), std::out_of_range);
}

TEST(ArenaLayoutCounter, EncodesVersionCopyAndPrefix) {
  const uint64_t w = EncodeCounter(kMaxCounterVersion, 1, 12345);
  EXPECT_EQ(CounterVersion(w), kMaxCounterVersion);
  EXPECT_EQ(CounterCopy(w), 1);
  EXPECT_EQ(CounterPrefix(w), 12345u);
  EXPECT_EQ(CounterPrefix(EncodeCounter(7, 0, kRelayFailed)), kRelayFailed);
}

// A poll that reads one flipped bit anywhere in the slot, or a slot torn between two writes, must
// not be taken as the relay's word: a wrong copy bit sent a reader to the live copy, whose chunks
// never matched their hashes.
TEST(ArenaLayoutCounter, EveryFlippedBitAndTornSlotFailsTheCheck) {
  alignas(8) std::array<std::byte, kCounterBytes> slot{};
  const uint64_t word = EncodeCounter(2, 1, 9);
  StoreCounter(slot.data(), word);
  ASSERT_EQ(LoadCounter(slot.data()), word);
  for (size_t bit = 0; bit < 8 * kCounterBytes; ++bit) {
    auto bad = slot;
    bad[bit / 8] ^= std::byte(1u << (bit % 8));
    EXPECT_EQ(LoadCounter(bad.data()), std::nullopt) << "bit " << bit;
  }
  alignas(8) std::array<std::byte, kCounterBytes> next{};
  StoreCounter(next.data(), EncodeCounter(2, 1, 10));
  auto torn = slot;
  std::copy(next.begin(), next.begin() + 8, torn.begin());  // new word, old check
  EXPECT_EQ(LoadCounter(torn.data()), std::nullopt);
  EXPECT_EQ(LoadCounter(std::array<std::byte, kCounterBytes>{}.data()), std::nullopt);  // never written
}

TEST(ArenaLayoutHashArea, CheckCoversTheVersion) {
  alignas(8) std::array<std::byte, kHashHeaderBytes + 16> area{};
  area[kHashHeaderBytes + 3] = std::byte{0x5a};
  const uint64_t check = HashAreaCheck(2, area.data(), area.size());
  EXPECT_EQ(check, HashAreaCheck(2, area.data(), area.size()));
  EXPECT_NE(check, HashAreaCheck(3, area.data(), area.size()));  // 2 -> 3 is one flipped bit
  area[kHashHeaderBytes + 9] ^= std::byte{1};
  EXPECT_NE(check, HashAreaCheck(2, area.data(), area.size()));
}

}  // namespace
}  // namespace weightport::arena_layout
