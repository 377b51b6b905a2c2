#include "weightport/core/memory_check.h"

#include <gtest/gtest.h>

namespace weightport {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(MemoryCheck, RefusesMoreThanTheRamAvailableNamingBothFigures) {
  MemoryAvailability have{.ram_available = 20 * kGiB, .shm_free = 24 * kGiB, .cgroup_left = {}};
  Status s = CheckMemoryFits(100 * kGiB, true, "publisher live weights", have);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("publisher live weights: 100.00 GiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("20.00 GiB of memory available"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("24.00 GiB free in /dev/shm"), std::string::npos) << s.message();
}

TEST(MemoryCheck, SharedMemoryIsAlsoBoundByDevShm) {
  MemoryAvailability have{.ram_available = 20 * kGiB, .shm_free = 2 * kGiB, .cgroup_left = {}};
  EXPECT_TRUE(CheckMemoryFits(4 * kGiB, false, "private", have).ok());
  EXPECT_FALSE(CheckMemoryFits(4 * kGiB, true, "shared", have).ok());
}

TEST(MemoryCheck, TheCgroupLimitCounts) {
  MemoryAvailability have{.ram_available = 20 * kGiB, .shm_free = {}, .cgroup_left = 1 * kGiB};
  Status s = CheckMemoryFits(2 * kGiB, false, "arena", have);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("memory.max"), std::string::npos) << s.message();
}

TEST(MemoryCheck, KeepsATenthInReserveAndUnknownFiguresRefuseNothing) {
  MemoryAvailability have{.ram_available = 10 * kGiB, .shm_free = {}, .cgroup_left = {}};
  EXPECT_TRUE(CheckMemoryFits(9 * kGiB, true, "a", have).ok());
  EXPECT_FALSE(CheckMemoryFits(9 * kGiB + kGiB / 2, true, "a", have).ok());
  EXPECT_TRUE(CheckMemoryFits(uint64_t{1} << 50, true, "a", MemoryAvailability{}).ok());
}

TEST(MemoryCheck, ThisMachineReportsItsMemory) {
  const MemoryAvailability have = QueryMemoryAvailability();
  EXPECT_GT(have.ram_available, 0u);
  EXPECT_TRUE(CheckMemoryFits(uint64_t{1} << 20, true, "one MiB").ok());
  EXPECT_FALSE(CheckMemoryFits(uint64_t{1} << 60, false, "an exbibyte").ok());
}

}  // namespace
}  // namespace weightport
