// Retiring a plan revokes the keys its peers hold. Every rank of a plan has a transport of its own
// (PlanMember, reshard ranks), and retiring the plan frees the rank's arena and closes that
// transport: a peer that still holds the arena's key then fails to read or write with it, named,
// instead of reaching memory that may since serve something else. Checked over UCX TCP and shared
// memory with raw one-sided operations, as a peer that ignores the protocol would issue them.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "engine/testing/raw_ops_test_util.h"
#include "weightport/engine/common/transport_factory.h"
#include "weightport/engine/rank/plan_rank.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport {
namespace {

using namespace engine_test;
using std::chrono::milliseconds;

class PlanRetire : public ::testing::TestWithParam<std::string> {};

TEST_P(PlanRetire, KeysOfARetiredPlanStopWorking) {
  auto factory = UcxTransportFactory(GetParam());
  ASSERT_TRUE(factory.ok()) << factory.status().ToString();
  auto plan = OneToOnePlan();
  const Endpoint src{PlanSide::kSource, 0};
  auto transport = (*factory)("src rank 0");
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  auto owner_loop = std::make_unique<ProgressLoop>(std::move(*transport));
  auto owner = PlanRank::Create(plan, src, *owner_loop);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  std::memset((*owner)->shard_bytes(0).data(), 0x5a, 64);
  const PlanPeer granted = (*owner)->peer_info();

  RawPeer peer(*factory, "peer");
  auto conn = peer.Connect(granted.address, "src rank 0");
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();

  // While the plan lives, the key reads the arena.
  ASSERT_TRUE(peer.Op(*conn, granted.key, false).ok());
  EXPECT_EQ(peer.landing()[0], std::byte{0x5a});

  // Retire the plan: its rank (arena) first, then its transport.
  owner->reset();
  owner_loop->Stop();
  owner_loop.reset();

  peer.ExpectRefused(*conn, granted.key, "src rank 0", "the retired plan's key");
}

// The owner releases a region while a peer's Gets of it are on their way (a publisher closing
// while a dropped subscriber still fetches). Over TCP the owner's worker answers those Gets from
// the region's address, so its memory must stay mapped until the worker is gone: the owner must
// not crash, and every Get completes once, with the old bytes or an error.
TEST_P(PlanRetire, ReleasingARegionWhileAPeerReadsItDoesNotCrashTheOwner) {
  auto factory = UcxTransportFactory(GetParam());
  ASSERT_TRUE(factory.ok());
  constexpr size_t kBytes = 64 << 20, kGets = 64, kEach = kBytes / kGets;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto owner_transport = (*factory)("owner");
    ASSERT_TRUE(owner_transport.ok());
    auto owner = std::make_unique<ProgressLoop>(std::move(*owner_transport));
    auto region = owner->Call([&](Transport& t) { return UcxAllocate(t, kBytes); });
    ASSERT_TRUE(region.ok()) << region.status().ToString();
    std::memset((*region)->data(), 0x33, kBytes);
    const RemoteKey key = (*region)->remote_key();
    const Bytes address = owner->Call([](Transport& t) { return t.address(); });

    RawPeer peer(*factory, "peer", kBytes);
    auto conn = peer.Connect(address, "owner");
    ASSERT_TRUE(conn.ok());
    std::vector<std::byte>& landing = peer.landing();
    std::atomic<int> done{0}, failed{0};
    peer.loop().Post([&](Transport&) {
      for (size_t i = 0; i < kGets; ++i)
        (*conn)->Get(peer.local(), i * kEach, key, i * kEach, kEach, [&](const Status& s) {
          failed += !s.ok();
          ++done;
        });
    });
    // Release the region at once, while the Gets are in flight, and let the owner go on serving.
    owner->Call([&](Transport&) { region->reset(); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (done.load() < static_cast<int>(kGets) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(5));
    EXPECT_EQ(done.load(), static_cast<int>(kGets));
    for (size_t i = 0; i < kBytes; i += 4096)
      if (landing[i] != std::byte{0} && landing[i] != std::byte{0x33}) FAIL() << "foreign bytes at " << i;
    owner->Stop();
    owner.reset();
  }
}

INSTANTIATE_TEST_SUITE_P(Ucx, PlanRetire, ::testing::Values("tcp", "shm"));

}  // namespace
}  // namespace weightport
