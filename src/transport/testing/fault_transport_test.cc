#include "weightport/transport/testing/fault_transport.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <set>
#include <thread>

#include "transport/conformance/transport_conformance.h"
#include "weightport/transport/testing/fake_transport.h"

namespace weightport::conformance {
namespace {

// Fake transports, each wrapped with `plan`.
TransportConformanceParam Wrapped(std::shared_ptr<FaultPlan> plan, uint64_t max_size = uint64_t{64} << 20) {
  auto fabric = std::make_shared<FakeFabric>();
  return TransportConformanceParam{
      .name = "FaultFreeFake",
      .factory = [fabric, plan](const std::string& name) -> Result<std::unique_ptr<Transport>> {
        WP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> fake, MakeFakeTransport(fabric, name));
        return MakeFaultInjectingTransport(std::move(fake), plan);
      },
      .max_size = max_size,
  };
}

// With no faults planned the decorator is a transparent Transport: it passes the whole suite.
INSTANTIATE_TEST_SUITE_P(FaultFreeFake, TransportConformance,
                         ::testing::Values(Wrapped(std::make_shared<FaultPlan>())), ParamName);

constexpr size_t kChunk = 256;

// a -> b through a decorated transport; b is a plain fake on the same fabric.
class FaultTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto param = Wrapped(plan_);
    WP_ASSERT_OK_AND_ASSIGN(a_, TestPeer::Create(param, "a"));
    WP_ASSERT_OK_AND_ASSIGN(b_, TestPeer::Create(param, "b"));
    WP_ASSERT_OK_AND_ASSIGN(src_, a_->Allocate(16 * kChunk));
    WP_ASSERT_OK_AND_ASSIGN(dst_, b_->Allocate(16 * kChunk));
    FillPattern(src_->data(), src_->size, 1);
    FillPattern(dst_->data(), dst_->size, 2);
    WP_ASSERT_OK_AND_ASSIGN(conn_, a_->Connect(*b_));
  }

  // Puts chunk i of src to chunk i of dst, for each i in [first, first + n), then flushes.
  Tally PutChunks(size_t first, size_t n) {
    Tally t(n + 1);
    a_->loop().Post([=, conn = conn_, region = src_->region.get(), key = dst_->key](Transport&) {
      for (size_t i = 0; i < n; ++i)
        conn->Put(*region, (first + i) * kChunk, key, (first + i) * kChunk, kChunk, t.callback(i));
      conn->Flush(t.callback(n));
    });
    EXPECT_TRUE(t.WaitAll());
    return t;
  }
  bool Landed(size_t i) const { return HasPattern(dst_->data() + i * kChunk, kChunk, 1, i * kChunk); }
  bool Untouched(size_t i) const { return HasPattern(dst_->data() + i * kChunk, kChunk, 2, i * kChunk); }

  std::shared_ptr<FaultPlan> plan_ = std::make_shared<FaultPlan>(42);
  std::unique_ptr<TestPeer> a_, b_;
  Buffer* src_ = nullptr;
  Buffer* dst_ = nullptr;
  Connection* conn_ = nullptr;
};

TEST_F(FaultTransportTest, DropsTheNthPut) {
  plan_->set_drop({.nth = 2});
  Tally t = PutChunks(0, 3);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_TRUE(IsOk(t.status(i))) << i;
  EXPECT_TRUE(Landed(0));
  EXPECT_TRUE(Untouched(1));
  EXPECT_TRUE(Landed(2));
  EXPECT_EQ(plan_->stats().dropped, 1u);
  EXPECT_EQ(plan_->stats().ops, 3u);
}

TEST_F(FaultTransportTest, DroppedGetLeavesDestinationUntouched) {
  plan_->set_drop({.nth = 1, .ops = kFaultGet});
  Tally t;
  a_->loop().Post([=, conn = conn_, region = src_->region.get(), key = dst_->key](Transport&) {
    conn->Get(*region, 0, key, 0, kChunk, t.callback());
  });
  EXPECT_TRUE(IsOk(t.Wait()));
  EXPECT_TRUE(HasPattern(src_->data(), src_->size, 1));
  EXPECT_EQ(plan_->stats().dropped, 1u);
}

TEST_F(FaultTransportTest, DelayedPutCompletesNoEarlierAndFlushWaitsForIt) {
  plan_->set_delay({.probability = 1.0}, Millis(200));
  const auto start = std::chrono::steady_clock::now();
  Tally t = PutChunks(0, 2);
  EXPECT_GE(std::chrono::steady_clock::now() - start, Millis(200));
  for (size_t i = 0; i < t.size(); ++i) EXPECT_TRUE(IsOk(t.status(i))) << i;
  EXPECT_TRUE(Landed(0) && Landed(1));
  EXPECT_EQ(plan_->stats().delayed, 2u);
}

TEST_F(FaultTransportTest, CorruptedPutFlipsExactlyOneBitAtThePeer) {
  plan_->set_corrupt({.nth = 1});
  Tally t = PutChunks(0, 1);
  EXPECT_TRUE(IsOk(t.status(0)));
  EXPECT_TRUE(IsOk(t.status(1)));
  int bits = 0;
  for (size_t i = 0; i < kChunk; ++i)
    bits += std::popcount(static_cast<unsigned>(dst_->data()[i] ^ src_->data()[i]));
  EXPECT_EQ(bits, 1);
  EXPECT_TRUE(Untouched(1));
  EXPECT_EQ(plan_->stats().corrupted, 1u);
}

TEST_F(FaultTransportTest, CorruptedGetFlipsExactlyOneBitLocally) {
  plan_->set_corrupt({.nth = 1, .ops = kFaultGet});
  Tally t;
  a_->loop().Post([=, conn = conn_, region = src_->region.get(), key = dst_->key](Transport&) {
    conn->Get(*region, 0, key, 0, kChunk, t.callback());
  });
  EXPECT_TRUE(IsOk(t.Wait()));
  int bits = 0;
  for (size_t i = 0; i < kChunk; ++i)
    bits += std::popcount(static_cast<unsigned>(dst_->data()[i] ^ src_->data()[i]));
  EXPECT_EQ(bits, 1);
  EXPECT_TRUE(HasPattern(src_->data() + kChunk, src_->size - kChunk, 1, kChunk));
}

TEST_F(FaultTransportTest, CorruptedSendArrivesWithOneBitFlipped) {
  plan_->set_corrupt({.nth = 1, .ops = kFaultSend});
  Bytes message(64);
  FillPattern(message.data(), message.size(), 5);
  Tally t;
  a_->loop().Post([=, conn = conn_](Transport&) { conn->Send(message, t.callback()); });
  EXPECT_TRUE(IsOk(t.Wait()));
  const auto got = b_->sink().WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].bytes.size(), message.size());
  int bits = 0;
  for (size_t i = 0; i < message.size(); ++i)
    bits += std::popcount(static_cast<unsigned>(got[0].bytes[i] ^ message[i]));
  EXPECT_EQ(bits, 1);
}

TEST_F(FaultTransportTest, OperationsBeyondNFailWithIoErrorAndMoveNothing) {
  plan_->set_fail_after(3);
  Tally t = PutChunks(0, 5);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(IsOk(t.status(i))) << i;
  for (size_t i = 3; i < 5; ++i) {
    EXPECT_EQ(t.status(i).code(), StatusCode::kIoError) << t.status(i).ToString();
    EXPECT_TRUE(FailsNaming(t.status(i), "b"));
  }
  EXPECT_TRUE(Landed(0) && Landed(1) && Landed(2));
  EXPECT_TRUE(Untouched(3) && Untouched(4));
  EXPECT_EQ(plan_->stats().failed, 2u);
}

TEST_F(FaultTransportTest, KilledPeerFailsPendingAndNewOperations) {
  plan_->set_delay({.probability = 1.0}, Millis(60000));  // keeps the puts pending
  Tally pending(3);
  a_->loop().Post([=, conn = conn_, region = src_->region.get(), key = dst_->key](Transport&) {
    for (size_t i = 0; i < 2; ++i)
      conn->Put(*region, i * kChunk, key, i * kChunk, kChunk, pending.callback(i));
    conn->Flush(pending.callback(2));
  });
  std::this_thread::sleep_for(Millis(20));
  EXPECT_EQ(pending.calls(0), 0);
  plan_->KillPeer("b");
  ASSERT_TRUE(pending.WaitAll(Millis(5000)));  // within a few idle loop turns, not 60 s
  Tally later(2);
  a_->loop().Post([=, conn = conn_, region = src_->region.get(), key = dst_->key](Transport&) {
    conn->Put(*region, 0, key, 0, kChunk, later.callback(0));
    conn->Flush(later.callback(1));
  });
  ASSERT_TRUE(later.WaitAll());
  for (const Tally* t : {&pending, &later}) {
    for (size_t i = 0; i < t->size(); ++i) {
      EXPECT_EQ(t->calls(i), 1);
      EXPECT_EQ(t->status(i).code(), StatusCode::kUnavailable) << t->status(i).ToString();
      EXPECT_TRUE(FailsNaming(t->status(i), "b"));
    }
  }
  EXPECT_FALSE(a_->loop().Call([conn = conn_](Transport&) { return conn->healthy(); }));
  EXPECT_EQ(plan_->stats().killed, 5u);
}

TEST_F(FaultTransportTest, CloseCancelsDelayedOperationsOnce) {
  plan_->set_delay({.probability = 1.0}, Millis(60000));
  Tally t(2);
  a_->loop().Post([=, conn = conn_, region = src_->region.get(), key = dst_->key](Transport&) {
    conn->Put(*region, 0, key, 0, kChunk, t.callback(0));
    conn->Flush(t.callback(1));
  });
  std::this_thread::sleep_for(Millis(20));
  a_->loop().Post([conn = conn_](Transport&) { conn->Close(); });
  ASSERT_TRUE(t.WaitAll(Millis(5000)));
  std::this_thread::sleep_for(Millis(50));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(t.calls(i), 1);
    EXPECT_EQ(t.status(i).code(), StatusCode::kCancelled) << t.status(i).ToString();
  }
}

TEST_F(FaultTransportTest, PlanChangesWhileRunning) {
  Tally before = PutChunks(0, 4);
  plan_->set_drop({.probability = 1.0});
  Tally during = PutChunks(4, 4);
  plan_->Clear();
  Tally after = PutChunks(8, 4);
  for (size_t i = 0; i < 5; ++i)
    EXPECT_TRUE(IsOk(before.status(i)) && IsOk(during.status(i)) && IsOk(after.status(i)));
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(Landed(i), i < 4 || i >= 8) << i;
  EXPECT_EQ(plan_->stats().dropped, 4u);
  EXPECT_EQ(plan_->stats().ops, 12u);
}

// Which of `n` puts a plan with `seed` drops at probability 0.5.
std::set<size_t> DroppedWithSeed(uint64_t seed, size_t n) {
  auto plan = std::make_shared<FaultPlan>(seed);
  plan->set_drop({.probability = 0.5});
  const auto param = Wrapped(plan);
  auto a = TestPeer::Create(param, "a");
  auto b = TestPeer::Create(param, "b");
  if (!a.ok() || !b.ok()) return {};
  auto src = (*a)->Allocate(n);
  auto dst = (*b)->Allocate(n);
  auto conn = (*a)->Connect(**b);
  if (!src.ok() || !dst.ok() || !conn.ok()) return {};
  std::memset((*src)->data(), 1, n);
  std::memset((*dst)->data(), 0, n);
  Tally t(n + 1);
  (*a)->loop().Post([=, conn = *conn, region = (*src)->region.get(), key = (*dst)->key](Transport&) {
    for (size_t i = 0; i < n; ++i) conn->Put(*region, i, key, i, 1, t.callback(i));
    conn->Flush(t.callback(n));
  });
  EXPECT_TRUE(t.WaitAll());
  std::set<size_t> dropped;
  for (size_t i = 0; i < n; ++i)
    if ((*dst)->data()[i] == std::byte{0}) dropped.insert(i);
  EXPECT_EQ(dropped.size(), plan->stats().dropped);
  return dropped;
}

TEST(FaultPlanTest, SameSeedSameFaults) {
  const auto first = DroppedWithSeed(7, 200);
  EXPECT_GT(first.size(), 50u);
  EXPECT_LT(first.size(), 150u);
  EXPECT_EQ(DroppedWithSeed(7, 200), first);
  EXPECT_NE(DroppedWithSeed(8, 200), first);
}

TEST(FaultPlanTest, RejectsMissingParts) {
  EXPECT_FALSE(MakeFaultInjectingTransport(nullptr, std::make_shared<FaultPlan>()).ok());
  auto fake = MakeFakeTransport(std::make_shared<FakeFabric>(), "x");
  ASSERT_TRUE(fake.ok());
  EXPECT_FALSE(MakeFaultInjectingTransport(std::move(*fake), nullptr).ok());
}

}  // namespace
}  // namespace weightport::conformance
