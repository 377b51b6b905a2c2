// HostStandInMemory: host memory playing a device; its hashes equal the host's over the same bytes.
#include "weightport/core/device_memory.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "weightport/core/hash.h"

namespace weightport {
namespace {

TEST(HostStandInMemory, HashOfConcatenatedPartsIsTheHashOfTheirBytesInOrder) {
  std::shared_ptr<DeviceMemory> device = HostStandInMemory();
  EXPECT_EQ(device->memory_type(), "host");
  std::mt19937_64 rng(9);
  std::vector<std::byte> bytes(100'000);
  for (auto& b : bytes) b = std::byte(rng());
  const std::byte* d = bytes.data();
  std::vector<std::byte> sequence(d + 60'000, d + 100'000);  // [60000, end), then [0, 60000)
  sequence.insert(sequence.end(), d, d + 60'000);
  const std::vector<DeviceBytes> parts = {{d + 60'000, 40'000}, {d, 0}, {d, 60'000}};
  auto got = device->HashConcatenated(parts);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, Xxh3(sequence.data(), sequence.size()));
  EXPECT_NE(*got, Xxh3(d, bytes.size())) << "the order of the parts counts";
  EXPECT_EQ(*device->HashConcatenated({}), Xxh3(nullptr, 0));
}

}  // namespace
}  // namespace weightport
