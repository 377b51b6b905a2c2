// Conformance: control messages, bounds, stale keys, Close, and lost peers.
#include <cstdint>
#include <limits>
#include <thread>

#include "transport/conformance/transport_conformance.h"

namespace weightport::conformance {
namespace {

// Message `seq` from sender `from`: [from u8][seq u32 LE][pattern bytes], `size` >= 5 bytes.
Bytes Numbered(uint8_t from, uint32_t seq, size_t size) {
  Bytes m(size);
  FillPattern(m.data(), size, seq);
  m[0] = std::byte{from};
  for (int i = 0; i < 4; ++i) m[1 + i] = static_cast<std::byte>(seq >> (8 * i));
  return m;
}
uint32_t SeqOf(const Bytes& m) {
  uint32_t seq = 0;
  for (int i = 0; i < 4; ++i) seq |= static_cast<uint32_t>(m[1 + i]) << (8 * i);
  return seq;
}

bool IsBoundsError(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kOutOfRange;
}

TEST_P(TransportConformance, MessagesOnOneConnectionArriveInOrder) {
  constexpr uint32_t kCount = 1000;
  WP_ASSERT_OK_AND_ASSIGN(auto a, Peer("a"));
  WP_ASSERT_OK_AND_ASSIGN(auto b, Peer("b"));
  WP_ASSERT_OK_AND_ASSIGN(Connection * conn, a->Connect(*b));
  const size_t max = a->loop().Call([](Transport& t) { return t.max_message_bytes(); });
  auto size_of = [max](uint32_t i) { return std::min<size_t>(5 + (i * 37) % 300, max); };
  Tally sent(kCount);
  a->loop().Post([=](Transport&) {
    for (uint32_t i = 0; i < kCount; ++i) conn->Send(Numbered(0, i, size_of(i)), sent.callback(i));
  });
  ASSERT_TRUE(sent.WaitAll());
  for (uint32_t i = 0; i < kCount; ++i) ASSERT_TRUE(IsOk(sent.status(i))) << "send " << i;
  const auto got = b->sink().WaitFor(kCount);
  ASSERT_EQ(got.size(), kCount);
  for (uint32_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(got[i].from, "a");
    ASSERT_EQ(got[i].bytes, Numbered(0, i, size_of(i)))
        << "message " << i << " holds seq " << SeqOf(got[i].bytes);
  }
}

TEST_P(TransportConformance, MessagesFromSeveralPeersArriveInOrderPerSender) {
  constexpr uint32_t kSenders = 3, kCount = 200;
  WP_ASSERT_OK_AND_ASSIGN(auto receiver, Peer("receiver"));
  std::vector<std::unique_ptr<TestPeer>> senders;
  Tally sent(kSenders * kCount);
  for (uint32_t s = 0; s < kSenders; ++s) {
    WP_ASSERT_OK_AND_ASSIGN(auto sender, Peer("sender" + std::to_string(s)));
    WP_ASSERT_OK_AND_ASSIGN(Connection * conn, sender->Connect(*receiver));
    sender->loop().Post([=](Transport&) {
      for (uint32_t i = 0; i < kCount; ++i) conn->Send(Numbered(s, i, 64), sent.callback(s * kCount + i));
    });
    senders.push_back(std::move(sender));
  }
  ASSERT_TRUE(sent.WaitAll());
  const auto got = receiver->sink().WaitFor(kSenders * kCount);
  ASSERT_EQ(got.size(), kSenders * kCount);
  std::vector<uint32_t> next(kSenders, 0);
  for (const auto& m : got) {
    const auto s = static_cast<uint32_t>(m.bytes[0]);
    ASSERT_LT(s, kSenders);
    EXPECT_EQ(m.from, "sender" + std::to_string(s));
    ASSERT_EQ(m.bytes, Numbered(s, next[s], 64)) << "sender " << s << " expected seq " << next[s];
    ++next[s];
  }
}

TEST_P(TransportConformance, MessageOfMaxSizeArrivesOneByteMoreFails) {
  WP_ASSERT_OK_AND_ASSIGN(auto a, Peer("a"));
  WP_ASSERT_OK_AND_ASSIGN(auto b, Peer("b"));
  WP_ASSERT_OK_AND_ASSIGN(Connection * conn, a->Connect(*b));
  const size_t max = a->loop().Call([](Transport& t) { return t.max_message_bytes(); });
  ASSERT_GE(max, 5u);
  Tally sent(3);
  a->loop().Post([=](Transport&) {
    conn->Send(Numbered(0, 1, max), sent.callback(0));
    conn->Send(Numbered(0, 2, max + 1), sent.callback(1));
    conn->Send(Numbered(0, 3, 5), sent.callback(2));
  });
  ASSERT_TRUE(sent.WaitAll());
  EXPECT_TRUE(IsOk(sent.status(0)));
  EXPECT_TRUE(FailsNaming(sent.status(1), "b"));
  EXPECT_TRUE(IsBoundsError(sent.status(1))) << sent.status(1).ToString();
  EXPECT_TRUE(IsOk(sent.status(2)));
  // Ordered delivery: once the last message is in, the oversized one would have been too.
  const auto got = b->sink().WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].bytes, Numbered(0, 1, max));
  EXPECT_EQ(got[1].bytes, Numbered(0, 3, 5));
}

TEST_P(TransportConformance, OutOfBoundsPutAndGetFailAndMoveNothing) {
  constexpr uint64_t kSize = 4096, kMax = std::numeric_limits<uint64_t>::max();
  WP_ASSERT_OK_AND_ASSIGN(auto a, Peer("a"));
  WP_ASSERT_OK_AND_ASSIGN(auto b, Peer("b"));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * local, a->Allocate(kSize));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * remote, b->Allocate(kSize));
  FillPattern(local->data(), kSize, 70);
  FillPattern(remote->data(), kSize, 71);
  WP_ASSERT_OK_AND_ASSIGN(Connection * conn, a->Connect(*b));
  struct Case {
    const char* what;
    uint64_t local_offset, remote_offset, length;
  };
  const Case cases[] = {{"past the remote end", 0, 4000, 97},      {"past the local end", 4000, 0, 97},
                        {"remote offset beyond", 0, kSize + 1, 0}, {"local offset beyond", kSize + 1, 0, 0},
                        {"remote overflow", 0, kMax - 8, 16},      {"local overflow", kMax - 8, 0, 16},
                        {"longer than both", 0, 0, kSize + 1}};
  for (bool put : {true, false}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(put ? "put " : "get ") + c.what);
      Tally t;
      a->loop().Post([=, region = local->region.get(), key = remote->key](Transport&) {
        if (put) {
          conn->Put(*region, c.local_offset, key, c.remote_offset, c.length, t.callback());
        } else {
          conn->Get(*region, c.local_offset, key, c.remote_offset, c.length, t.callback());
        }
      });
      const Status s = t.Wait();
      EXPECT_TRUE(FailsNaming(s, "b"));
      EXPECT_TRUE(IsBoundsError(s)) << s.ToString();
    }
  }
  Tally flushed;
  a->loop().Post([=](Transport&) { conn->Flush(flushed.callback()); });
  ASSERT_TRUE(IsOk(flushed.Wait()));
  EXPECT_TRUE(HasPattern(local->data(), kSize, 70)) << "local region changed";
  EXPECT_TRUE(HasPattern(remote->data(), kSize, 71)) << "remote region changed";

  // Exactly up to both ends is in bounds.
  Tally edge(2);
  a->loop().Post([=, region = local->region.get(), key = remote->key](Transport&) {
    conn->Put(*region, 4000, key, 4000, kSize - 4000, edge.callback(0));
    conn->Flush(edge.callback(1));
  });
  ASSERT_TRUE(IsOk(edge.Wait(0)));
  ASSERT_TRUE(IsOk(edge.Wait(1)));
  EXPECT_TRUE(HasPattern(remote->data() + 4000, kSize - 4000, 70, 4000));
}

TEST_P(TransportConformance, KeyOfDeregisteredRegionFails) {
  if (!GetParam().detects_deregistered_keys) GTEST_SKIP() << "backend cannot detect stale keys";
  WP_ASSERT_OK_AND_ASSIGN(auto a, Peer("a"));
  WP_ASSERT_OK_AND_ASSIGN(auto b, Peer("b"));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * local, a->Allocate(4096));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * remote, b->Allocate(4096));
  FillPattern(local->data(), 4096, 72);
  WP_ASSERT_OK_AND_ASSIGN(Connection * conn, a->Connect(*b));
  const RemoteKey key = remote->key;
  b->Deregister(remote);  // the memory stays allocated: a missed check must not corrupt the heap
  FillPattern(remote->data(), 4096, 73);
  Tally t(3);
  a->loop().Post([=, region = local->region.get()](Transport&) {
    conn->Put(*region, 0, key, 0, 64, t.callback(0));
    conn->Get(*region, 0, key, 0, 64, t.callback(1));
    conn->Flush(t.callback(2));
  });
  ASSERT_TRUE(t.WaitAll());
  EXPECT_TRUE(FailsNaming(t.status(0), "b")) << "put";
  EXPECT_TRUE(FailsNaming(t.status(1), "b")) << "get";
  EXPECT_TRUE(HasPattern(remote->data(), 4096, 73));
  EXPECT_TRUE(HasPattern(local->data(), 4096, 72));
}

// Issues puts, a flush and a send, then closes (the connection or the transport) in the same turn
// of the loop, so all of them are pending at Close().
void CheckCloseCancelsPending(TransportConformance& test, bool close_transport) {
  constexpr size_t kPuts = 64, kEach = 4096;
  WP_ASSERT_OK_AND_ASSIGN(auto a, test.Peer("a"));
  WP_ASSERT_OK_AND_ASSIGN(auto b, test.Peer("b"));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * src, a->Allocate(kPuts * kEach));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * dst, b->Allocate(kPuts * kEach));
  WP_ASSERT_OK_AND_ASSIGN(Connection * conn, a->Connect(*b));
  const MemoryRegion* region = src->region.get();
  // The connection is wired up first: UCX 1.13's TCP transport asserts (tcp_ep.c:478, the process
  // aborts) when a connect it still has in flight is refused while the endpoint closes, about once
  // in 300 runs under load. What is tested is the close of a connection with operations pending.
  Tally ready(1);
  a->loop().Post([=, key = dst->key](Transport&) { conn->Put(*region, 0, key, 0, 64, ready.callback(0)); });
  ASSERT_TRUE(IsOk(ready.Wait(0)));
  Tally pending(kPuts + 2);
  a->loop().Post([=, key = dst->key](Transport& t) {
    for (size_t i = 0; i < kPuts; ++i)
      conn->Put(*region, i * kEach, key, i * kEach, kEach, pending.callback(i));
    conn->Flush(pending.callback(kPuts));
    conn->Send(Bytes(8), pending.callback(kPuts + 1));
    if (close_transport) {
      t.Close();
      t.Close();
    } else {
      conn->Close();
      conn->Close();
    }
  });
  ASSERT_TRUE(pending.WaitAll());
  Tally after(3);
  a->loop().Post([=, key = dst->key](Transport&) {
    conn->Put(*region, 0, key, 0, 8, after.callback(0));
    conn->Flush(after.callback(1));
    conn->Send(Bytes(8), after.callback(2));
  });
  ASSERT_TRUE(after.WaitAll());
  std::this_thread::sleep_for(Millis(100));  // a duplicate completion would show up by now
  for (size_t i = 0; i < pending.size(); ++i) {
    EXPECT_EQ(pending.calls(i), 1) << "pending op " << i;
    EXPECT_TRUE(FailsNaming(pending.status(i), "b")) << "pending op " << i;
  }
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after.calls(i), 1) << "op after close " << i;
    EXPECT_TRUE(FailsNaming(after.status(i), "b")) << "op after close " << i;
    EXPECT_EQ(after.status(i).code(), StatusCode::kFailedPrecondition) << after.status(i).ToString();
  }
  EXPECT_FALSE(a->loop().Call([=](Transport&) { return conn->healthy(); }));
  if (close_transport) {
    std::vector<std::byte> memory(64);
    EXPECT_FALSE(a->loop().Call([&](Transport& t) { return t.Register(memory.data(), memory.size()).ok(); }));
    EXPECT_FALSE(a->loop().Call([&](Transport& t) { return t.Connect(b->address(), b->name()).ok(); }));
  }
}

TEST_P(TransportConformance, ConnectionCloseCancelsPendingOperationsExactlyOnce) {
  CheckCloseCancelsPending(*this, /*close_transport=*/false);
}

TEST_P(TransportConformance, TransportCloseCancelsPendingOperationsExactlyOnce) {
  CheckCloseCancelsPending(*this, /*close_transport=*/true);
}

TEST_P(TransportConformance, OperationsToADestroyedPeerFailNamingIt) {
  WP_ASSERT_OK_AND_ASSIGN(auto a, Peer("a"));
  WP_ASSERT_OK_AND_ASSIGN(auto b, Peer("doomed-peer"));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * src, a->Allocate(4096));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * dst, b->Allocate(4096));
  WP_ASSERT_OK_AND_ASSIGN(Connection * conn, a->Connect(*b));
  const RemoteKey key = dst->key;
  const MemoryRegion* region = src->region.get();
  Tally first(2);
  a->loop().Post([=](Transport&) {
    conn->Put(*region, 0, key, 0, 64, first.callback(0));
    conn->Flush(first.callback(1));
  });
  ASSERT_TRUE(IsOk(first.Wait(0)));
  ASSERT_TRUE(IsOk(first.Wait(1)));

  // The memory outlives the peer, so a backend that misses the loss cannot corrupt the heap.
  std::shared_ptr<std::byte[]> keep = dst->memory;
  b.reset();
  Status last;
  const bool failed = WaitUntil(
      [&] {
        Tally t;
        a->loop().Post([=](Transport&) { conn->Put(*region, 0, key, 0, 64, t.callback()); });
        last = t.Wait();
        return !last.ok();
      },
      GetParam().peer_loss_timeout);
  ASSERT_TRUE(failed) << "puts to a destroyed peer still succeed after "
                      << GetParam().peer_loss_timeout.count() << " ms";
  EXPECT_TRUE(FailsNaming(last, "doomed-peer"));
  Tally later(2);
  a->loop().Post([=](Transport&) {
    conn->Put(*region, 0, key, 0, 64, later.callback(0));
    conn->Send(Bytes(8), later.callback(1));
  });
  ASSERT_TRUE(later.WaitAll());
  EXPECT_TRUE(FailsNaming(later.status(0), "doomed-peer")) << "put";
  EXPECT_TRUE(FailsNaming(later.status(1), "doomed-peer")) << "send";
  EXPECT_FALSE(a->loop().Call([=](Transport&) { return conn->healthy(); }));
}

}  // namespace
}  // namespace weightport::conformance
