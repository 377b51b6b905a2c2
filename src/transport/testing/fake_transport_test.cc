// Fake-specific behaviour. These tests drive the transports by hand on the test thread (each is
// still used from one thread only), which makes "when exactly does it complete" observable.
#include "weightport/transport/testing/fake_transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "transport/conformance/transport_conformance.h"

namespace weightport {
namespace {

using conformance::FailsNaming;
using conformance::IsOk;
using std::chrono::milliseconds;

// Records one completion in place (single-threaded tests).
struct Result1 {
  int calls = 0;
  Status status;
  Completion callback() {
    return [this](const Status& s) {
      ++calls;
      status = s;
    };
  }
};

class FakeTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = std::move(MakeFakeTransport(fabric_, "a")).value();
    b_ = std::move(MakeFakeTransport(fabric_, "b")).value();
    src_region_ = std::move(a_->Register(src_.data(), src_.size())).value();
    dst_region_ = std::move(b_->Register(dst_.data(), dst_.size())).value();
    conn_ = std::move(a_->Connect(b_->address(), "b")).value();
    for (size_t i = 0; i < src_.size(); ++i) src_[i] = static_cast<std::byte>(i);
  }
  void Put(uint64_t offset, uint64_t length, Result1& r, const RemoteKey* key = nullptr) {
    conn_->Put(*src_region_, offset, key ? *key : dst_region_->remote_key(), offset, length, r.callback());
  }

  std::shared_ptr<FakeFabric> fabric_ = std::make_shared<FakeFabric>();
  std::vector<std::byte> src_ = std::vector<std::byte>(256), dst_ = std::vector<std::byte>(256);
  std::unique_ptr<Transport> a_, b_;
  std::unique_ptr<MemoryRegion> src_region_, dst_region_;
  std::shared_ptr<Connection> conn_;
};

TEST_F(FakeTransportTest, ValidOperationCompletesOnlyInsideALaterProgress) {
  Result1 put, flush;
  Put(0, 16, put);
  conn_->Flush(flush.callback());
  EXPECT_EQ(put.calls, 0);
  EXPECT_EQ(dst_[1], std::byte{0}) << "data moved inside Put()";
  EXPECT_EQ(a_->Progress(), 2u);
  EXPECT_EQ(put.calls, 1);
  EXPECT_EQ(flush.calls, 1);
  EXPECT_TRUE(IsOk(put.status));
  EXPECT_EQ(dst_[15], std::byte{15});
  EXPECT_EQ(a_->Progress(), 0u);
}

TEST_F(FakeTransportTest, TakesHostMemoryOnly) {
  EXPECT_TRUE(a_->TakesMemory("host"));
  EXPECT_FALSE(a_->TakesMemory("cuda"));
}

TEST_F(FakeTransportTest, InvalidOperationFailsInsideTheCall) {
  Result1 r;
  Put(200, 100, r);
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.status.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(FailsNaming(r.status, "b"));
}

TEST_F(FakeTransportTest, RefusesForeignAndForgedKeysAndAddresses) {
  Result1 r1, r2, r3;
  Put(0, 1, r1, &src_region_->remote_key());  // a's own region is not b's
  EXPECT_NE(r1.status.message().find("another transport"), std::string::npos) << r1.status.ToString();
  RemoteKey forged = dst_region_->remote_key();
  forged.length += 100;
  Put(0, 1, r2, &forged);
  EXPECT_EQ(r2.status.code(), StatusCode::kInvalidArgument);
  auto other_fabric = std::make_shared<FakeFabric>();
  auto c = std::move(MakeFakeTransport(other_fabric, "c")).value();
  auto c_region = std::move(c->Register(dst_.data(), dst_.size())).value();
  Put(0, 1, r3, &c_region->remote_key());
  EXPECT_EQ(r3.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a_->Connect(c->address(), "c").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a_->Connect(Bytes(3), "junk").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FakeTransportTest, LoopbackCopiesWithinOneRegion) {
  auto self = std::move(a_->Connect(a_->address(), "self")).value();
  Result1 r;
  self->Put(*src_region_, 0, src_region_->remote_key(), 8, 32, r.callback());  // overlapping
  a_->Progress();
  ASSERT_TRUE(IsOk(r.status));
  for (size_t i = 0; i < 32; ++i) ASSERT_EQ(src_[8 + i], static_cast<std::byte>(i));
}

TEST_F(FakeTransportTest, LatencyDefersExecution) {
  auto slow = std::move(MakeFakeTransport(fabric_, "slow", FakeOptions{.latency = milliseconds(50)})).value();
  auto region = std::move(slow->Register(src_.data(), src_.size())).value();
  auto conn = std::move(slow->Connect(b_->address(), "b")).value();
  Result1 r;
  const auto start = std::chrono::steady_clock::now();
  conn->Put(*region, 0, dst_region_->remote_key(), 0, 4, r.callback());
  EXPECT_EQ(slow->Progress(), 0u);
  while (r.calls == 0) {
    slow->WaitForEvent(milliseconds(1000));
    slow->Progress();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(900))
      << "WaitForEvent ignored the due time";
}

TEST_F(FakeTransportTest, MessagesWaitForAHandlerAndNameTheSender) {
  Result1 sent;
  conn_->Send(Bytes{std::byte{7}}, sent.callback());
  a_->Progress();
  ASSERT_TRUE(IsOk(sent.status));
  EXPECT_EQ(b_->Progress(), 0u);  // no handler yet: the message waits
  std::vector<std::string> from;
  b_->SetMessageHandler([&](const std::string& f, Bytes m) {
    from.push_back(f);
    EXPECT_EQ(m, Bytes{std::byte{7}});
  });
  EXPECT_EQ(b_->Progress(), 1u);
  EXPECT_EQ(from, std::vector<std::string>{"a"});
}

TEST_F(FakeTransportTest, WakeIsStickyAndWaitHonoursTimeout) {
  b_->Wake();
  auto start = std::chrono::steady_clock::now();
  b_->WaitForEvent(milliseconds(5000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
  start = std::chrono::steady_clock::now();
  b_->WaitForEvent(milliseconds(30));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(30));
}

TEST_F(FakeTransportTest, DeregisteredBeforeExecutionFails) {
  Result1 r;
  Put(0, 8, r);
  dst_region_.reset();
  a_->Progress();
  EXPECT_EQ(r.calls, 1);
  EXPECT_TRUE(FailsNaming(r.status, "b"));
  EXPECT_EQ(dst_[1], std::byte{0});
}

TEST_F(FakeTransportTest, DestroyedTransportCompletesItsPendingOperations) {
  Result1 r;
  Put(0, 8, r);
  src_region_.reset();
  a_.reset();
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.status.code(), StatusCode::kCancelled);
  // The connection outlives its transport; it fails fast.
  Result1 after;
  conn_->Flush(after.callback());
  EXPECT_EQ(after.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(conn_->healthy());
}

TEST_F(FakeTransportTest, LostPeerIsUnavailableAndCannotBeReached) {
  const Bytes address = b_->address();
  dst_region_.reset();
  b_.reset();
  EXPECT_FALSE(conn_->healthy());
  Result1 r;
  conn_->Flush(r.callback());
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(FailsNaming(r.status, "b"));
  EXPECT_EQ(a_->Connect(address, "b").status().code(), StatusCode::kUnavailable);
}

TEST_F(FakeTransportTest, FabricCountsTransportsAndRegions) {
  EXPECT_EQ(fabric_->live_transports(), 2u);
  EXPECT_EQ(fabric_->registered_regions(), 2u);
  dst_region_.reset();
  EXPECT_EQ(fabric_->registered_regions(), 1u);
  b_.reset();
  EXPECT_EQ(fabric_->live_transports(), 1u);
}

TEST(FakeTransportOptionsTest, RejectsBadArguments) {
  EXPECT_FALSE(MakeFakeTransport(nullptr, "x").ok());
  EXPECT_FALSE(MakeFakeTransport(std::make_shared<FakeFabric>(), "").ok());
  EXPECT_FALSE(
      MakeFakeTransport(std::make_shared<FakeFabric>(), "x", FakeOptions{.max_message_bytes = 0}).ok());
}

}  // namespace
}  // namespace weightport
