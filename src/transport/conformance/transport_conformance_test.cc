// Conformance: moving bytes. Sizes, offsets, several peers at once, bursts, many posting threads.
#include <thread>

#include "transport/conformance/transport_conformance.h"

namespace weightport::conformance {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kGuard = 16;  // bytes checked untouched after each written range

// Puts `length` bytes from peer a (at an odd offset) into peer b (at another odd offset), flushes,
// and checks the bytes at b and around them; then zeroes the source range and Gets it back.
void RoundTrip(const TransportConformanceParam& param, uint64_t length, Millis timeout) {
  constexpr uint64_t kSrcOffset = 3, kDstOffset = 5;
  WP_ASSERT_OK_AND_ASSIGN(auto a, TestPeer::Create(param, "a"));
  WP_ASSERT_OK_AND_ASSIGN(auto b, TestPeer::Create(param, "b"));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * src, a->Allocate(kSrcOffset + length + kGuard));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * dst, b->Allocate(kDstOffset + length + kGuard));
  FillPattern(src->data(), src->size, 1);
  FillPattern(dst->data(), dst->size, 2);
  WP_ASSERT_OK_AND_ASSIGN(Connection * conn, a->Connect(*b));
  const MemoryRegion* region = src->region.get();

  Tally put(2);
  a->loop().Post([=, key = dst->key](Transport&) {
    conn->Put(*region, kSrcOffset, key, kDstOffset, length, put.callback(0));
    conn->Flush(put.callback(1));
  });
  ASSERT_TRUE(IsOk(put.Wait(0, timeout))) << "put";
  ASSERT_TRUE(IsOk(put.Wait(1, timeout))) << "flush";
  EXPECT_TRUE(HasPattern(dst->data(), kDstOffset, 2)) << "bytes before the put range";
  EXPECT_TRUE(HasPattern(dst->data() + kDstOffset, length, 1, kSrcOffset)) << "put range";
  EXPECT_TRUE(HasPattern(dst->data() + kDstOffset + length, kGuard, 2, kDstOffset + length)) << "after";

  std::memset(src->data() + kSrcOffset, 0, length);
  Tally get;
  a->loop().Post([=, key = dst->key](Transport&) {
    conn->Get(*region, kSrcOffset, key, kDstOffset, length, get.callback());
  });
  ASSERT_TRUE(IsOk(get.Wait(0, timeout))) << "get";
  EXPECT_TRUE(HasPattern(src->data(), src->size, 1)) << "source after get";
}

TEST_P(TransportConformance, PutGetSmallSizes) {
  for (uint64_t length : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, kMiB + 3}) {
    if (length > GetParam().max_size) continue;
    SCOPED_TRACE("length " + std::to_string(length));
    RoundTrip(GetParam(), length, kOpTimeout);
    if (HasFatalFailure()) return;
  }
}

TEST_P(TransportConformance, PutGet64MiB) {
  if (GetParam().max_size < 64 * kMiB) GTEST_SKIP() << "max_size " << GetParam().max_size;
  RoundTrip(GetParam(), 64 * kMiB, kLargeTimeout);
}

TEST_P(TransportConformance, PutGet1GiB) {
  if (GetParam().max_size < kGiB) GTEST_SKIP() << "max_size " << GetParam().max_size;
  if (kThreadSanitizer) GTEST_SKIP() << "2 GiB under TSan shadow memory is too much for this machine";
  RoundTrip(GetParam(), kGiB, kLargeTimeout);
}

TEST_P(TransportConformance, OneInitiatorPutsToSeveralPeersConcurrently) {
  constexpr uint64_t kSize = kMiB + 7;
  for (size_t n = 1; n <= 4; ++n) {
    SCOPED_TRACE(std::to_string(n) + " peers");
    WP_ASSERT_OK_AND_ASSIGN(auto a, Peer("initiator"));
    WP_ASSERT_OK_AND_ASSIGN(Buffer * src, a->Allocate(n * kSize));
    FillPattern(src->data(), src->size, 10);
    std::vector<std::unique_ptr<TestPeer>> peers;
    std::vector<Buffer*> dsts;
    std::vector<Connection*> conns;
    std::vector<RemoteKey> keys;
    for (size_t i = 0; i < n; ++i) {
      WP_ASSERT_OK_AND_ASSIGN(auto peer, Peer("target" + std::to_string(i)));
      WP_ASSERT_OK_AND_ASSIGN(Buffer * dst, peer->Allocate(kSize));
      FillPattern(dst->data(), kSize, 20 + i);
      WP_ASSERT_OK_AND_ASSIGN(Connection * conn, a->Connect(*peer));
      dsts.push_back(dst);
      keys.push_back(dst->key);
      conns.push_back(conn);
      peers.push_back(std::move(peer));
    }
    Tally done(2 * n);
    a->loop().Post([=, region = src->region.get()](Transport&) {
      for (size_t i = 0; i < n; ++i)
        conns[i]->Put(*region, i * kSize, keys[i], 0, kSize, done.callback(2 * i));
      for (size_t i = 0; i < n; ++i) conns[i]->Flush(done.callback(2 * i + 1));
    });
    ASSERT_TRUE(done.WaitAll());
    for (size_t j = 0; j < 2 * n; ++j) EXPECT_TRUE(IsOk(done.status(j))) << "op " << j;
    for (size_t i = 0; i < n; ++i)
      EXPECT_TRUE(HasPattern(dsts[i]->data(), kSize, 10, i * kSize)) << "peer " << i;
  }
}

TEST_P(TransportConformance, SeveralPeersPutIntoOneTargetConcurrently) {
  constexpr uint64_t kSize = kMiB + 7;
  for (size_t n = 1; n <= 4; ++n) {
    SCOPED_TRACE(std::to_string(n) + " peers");
    WP_ASSERT_OK_AND_ASSIGN(auto target, Peer("target"));
    WP_ASSERT_OK_AND_ASSIGN(Buffer * dst, target->Allocate(n * kSize));
    FillPattern(dst->data(), dst->size, 30);
    std::vector<std::unique_ptr<TestPeer>> peers;
    Tally done(2 * n);
    for (size_t i = 0; i < n; ++i) {
      WP_ASSERT_OK_AND_ASSIGN(auto peer, Peer("source" + std::to_string(i)));
      WP_ASSERT_OK_AND_ASSIGN(Buffer * src, peer->Allocate(kSize));
      FillPattern(src->data(), kSize, 40, i * kSize);  // together: pattern 40 over the whole target
      WP_ASSERT_OK_AND_ASSIGN(Connection * conn, peer->Connect(*target));
      peers.push_back(std::move(peer));
      peers.back()->loop().Post([=, region = src->region.get(), key = dst->key](Transport&) {
        conn->Put(*region, 0, key, i * kSize, kSize, done.callback(2 * i));
        conn->Flush(done.callback(2 * i + 1));
      });
    }
    ASSERT_TRUE(done.WaitAll());
    for (size_t j = 0; j < 2 * n; ++j) EXPECT_TRUE(IsOk(done.status(j))) << "op " << j;
    EXPECT_TRUE(HasPattern(dst->data(), dst->size, 40));
  }
}

TEST_P(TransportConformance, EveryOperationOfABurstCompletesExactlyOnce) {
  constexpr size_t kOps = 10000, kEach = 8;
  WP_ASSERT_OK_AND_ASSIGN(auto a, Peer("a"));
  WP_ASSERT_OK_AND_ASSIGN(auto b, Peer("b"));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * src, a->Allocate(kOps * kEach));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * dst, b->Allocate(kOps * kEach));
  FillPattern(src->data(), src->size, 50);
  FillPattern(dst->data(), dst->size, 51);
  WP_ASSERT_OK_AND_ASSIGN(Connection * conn, a->Connect(*b));
  Tally done(kOps + 1);
  a->loop().Post([=, region = src->region.get(), key = dst->key](Transport&) {
    for (size_t i = 0; i < kOps; ++i) conn->Put(*region, i * kEach, key, i * kEach, kEach, done.callback(i));
    conn->Flush(done.callback(kOps));
  });
  ASSERT_TRUE(done.WaitAll(kLargeTimeout));
  std::this_thread::sleep_for(Millis(100));  // a duplicate completion would show up by now
  size_t bad = 0;
  for (size_t i = 0; i <= kOps; ++i) {
    if (done.calls(i) == 1 && done.status(i).ok()) continue;
    if (++bad <= 5)
      ADD_FAILURE() << "op " << i << ": " << done.calls(i) << " calls, " << done.status(i).ToString();
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_TRUE(HasPattern(dst->data(), dst->size, 50));
}

TEST_P(TransportConformance, ThreadsPostOperationsToOneLoop) {
  constexpr size_t kThreads = 4, kPerThread = 250, kEach = 64;
  WP_ASSERT_OK_AND_ASSIGN(auto a, Peer("a"));
  WP_ASSERT_OK_AND_ASSIGN(auto b, Peer("b"));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * src, a->Allocate(kThreads * kPerThread * kEach));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * dst, b->Allocate(src->size));
  FillPattern(src->data(), src->size, 60);
  FillPattern(dst->data(), dst->size, 61);
  WP_ASSERT_OK_AND_ASSIGN(Connection * conn, a->Connect(*b));
  Tally done(kThreads * kPerThread);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < kPerThread; ++k) {
        const size_t i = t * kPerThread + k;
        a->loop().Post([=, region = src->region.get(), key = dst->key](Transport&) {
          conn->Put(*region, i * kEach, key, i * kEach, kEach, done.callback(i));
        });
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_TRUE(done.WaitAll());
  Tally flushed;
  a->loop().Post([=](Transport&) { conn->Flush(flushed.callback()); });
  ASSERT_TRUE(IsOk(flushed.Wait()));
  for (size_t i = 0; i < done.size(); ++i) ASSERT_TRUE(IsOk(done.status(i))) << "op " << i;
  EXPECT_TRUE(HasPattern(dst->data(), dst->size, 60));
}

}  // namespace
}  // namespace weightport::conformance
