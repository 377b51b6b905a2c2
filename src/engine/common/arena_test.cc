#include "weightport/engine/common/arena.h"

#include <gtest/gtest.h>

#include "weightport/transport/progress_loop.h"
#include "weightport/transport/testing/fake_transport.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport {
namespace {

TEST(Arena, FakeTransportArenaIsZeroedRegisteredOnceAndReachableByAPeer) {
  auto fabric = std::make_shared<FakeFabric>();
  ProgressLoop owner(*MakeFakeTransport(fabric, "owner"));
  ProgressLoop peer(*MakeFakeTransport(fabric, "peer"));
  constexpr size_t kSize = (1 << 20) + 3;
  auto arena = owner.Call([](Transport& t) { return AllocateArena(t, kSize, "test arena"); });
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  EXPECT_EQ(fabric->registered_regions(), 1u);
  EXPECT_EQ((*arena)->size(), kSize);
  EXPECT_EQ((*arena)->remote_key().length, kSize);
  for (size_t i = 0; i < kSize; i += 4093) EXPECT_EQ((*arena)->data()[i], std::byte{0});
  (*arena)->data()[kSize - 1] = std::byte{42};

  // A peer reads the last byte with a Get into its own registered buffer.
  std::vector<std::byte> local(16);
  Status got = peer.Call([&](Transport& t) -> Status {
    auto region = RegisterArena(t, local.data(), local.size(), "peer buffer");
    if (!region.ok()) return region.status();
    auto c = t.Connect(owner.Call([](Transport& o) { return o.address(); }), "owner");
    if (!c.ok()) return c.status();
    auto done = std::make_shared<std::optional<Status>>();
    (*c)->Get(**region, 0, (*arena)->remote_key(), kSize - 1, 1, [done](const Status& s) { *done = s; });
    for (int i = 0; i < 10000 && !done->has_value(); ++i) t.Progress();
    return done->value_or(Timeout("Get did not complete"));
  });
  EXPECT_TRUE(got.ok()) << got.ToString();
  EXPECT_EQ(local[0], std::byte{42});
  owner.Call([&](Transport&) { arena->reset(); });
  EXPECT_EQ(fabric->registered_regions(), 0u);
}

TEST(Arena, EmptyArenaIsRefusedWithItsName) {
  auto fabric = std::make_shared<FakeFabric>();
  ProgressLoop loop(*MakeFakeTransport(fabric, "owner"));
  auto arena = loop.Call([](Transport& t) { return AllocateArena(t, 0, "publisher weights"); });
  ASSERT_FALSE(arena.ok());
  EXPECT_NE(arena.status().message().find("publisher weights"), std::string::npos);
}

TEST(Arena, UcxArenaComesFromUcxAllocate) {
  auto transport = MakeUcxTransport({.name = "arena-test", .transports = {"posix", "sysv", "cma", "self"}});
  if (!transport.ok()) GTEST_SKIP() << "no UCX shared-memory transport: " << transport.status().ToString();
  ProgressLoop loop(std::move(*transport));
  auto arena = loop.Call([](Transport& t) { return AllocateArena(t, 4 << 20, "ucx arena"); });
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  EXPECT_EQ((*arena)->size(), 4u << 20);
  EXPECT_FALSE((*arena)->remote_key().packed.empty());
  (*arena)->data()[0] = std::byte{1};  // writable
  loop.Call([&](Transport&) { arena->reset(); });
}

}  // namespace
}  // namespace weightport
