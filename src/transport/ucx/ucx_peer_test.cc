// UCX transport: peers that die, connections and transports dropped with work pending, and
// ordering of large (rendezvous) and small (eager) messages.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "transport/conformance/transport_conformance.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport {
namespace {

using conformance::FillPattern;
using conformance::IsOk;
using conformance::Tally;
using conformance::TestPeer;
using conformance::TransportConformanceParam;
using Millis = std::chrono::milliseconds;

struct Config {
  const char* name;
  std::vector<std::string> transports;
};
const Config kConfigs[] = {{"shm", {"posix", "sysv", "cma", "self"}}, {"tcp", {"tcp"}}};

TransportConformanceParam Param(const Config& config, size_t max_message_bytes = 1 << 20) {
  TransportConformanceParam param;
  param.name = config.name;
  param.factory = [=](const std::string& name) {
    UcxOptions options;
    options.name = name;
    options.transports = config.transports;
    options.max_message_bytes = max_message_bytes;
    options.keepalive_interval = Millis(200);
    return MakeUcxTransport(options);
  };
  return param;
}

// A peer in a forked child that lives until it is killed; the parent gets its address and a key.
struct Child {
  pid_t pid = -1;
  Bytes address;
  RemoteKey key;
};

Result<Child> StartChild(const TransportConformanceParam& param) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return ErrnoError("socketpair", errno);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork", errno);
  if (pid == 0) {
    ::close(fds[0]);
    auto peer = TestPeer::Create(param, "child");
    if (!peer.ok()) ::_exit(1);
    auto buffer = (*peer)->Allocate(4096);
    if (!buffer.ok()) ::_exit(2);
    const Bytes key = (*buffer)->key.Serialize();
    for (const Bytes* frame : {&(*peer)->address(), &key}) {
      const uint64_t n = frame->size();
      if (::write(fds[1], &n, 8) != 8 || ::write(fds[1], frame->data(), n) != static_cast<ssize_t>(n))
        ::_exit(3);
    }
    for (;;) ::pause();  // until SIGKILL
  }
  ::close(fds[1]);
  Child child;
  child.pid = pid;
  for (Bytes* frame : {&child.address, &child.key.packed}) {
    uint64_t n = 0;
    if (::read(fds[0], &n, 8) != 8) break;
    frame->resize(n);
    for (size_t got = 0; got < n;) {
      const ssize_t r = ::read(fds[0], frame->data() + got, n - got);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
  }
  ::close(fds[0]);
  auto key = RemoteKey::Deserialize(child.key.packed, "child key");
  if (!key.ok() || child.address.empty()) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return Internal("child did not report its address and key");
  }
  child.key = *key;
  return child;
}

TEST(UcxPeer, KilledPeerProcessIsReportedLost) {
  for (const Config& config : kConfigs) {
    SCOPED_TRACE(config.name);
    auto child = StartChild(Param(config));
    ASSERT_TRUE(IsOk(child.status()));
    auto parent = TestPeer::Create(Param(config), "parent");
    ASSERT_TRUE(IsOk(parent.status()));
    auto src = (*parent)->Allocate(4096);
    ASSERT_TRUE(IsOk(src.status()));
    auto conn = (*parent)->Connect(child->address, "child-process");
    ASSERT_TRUE(IsOk(conn.status()));
    auto put_and_flush = [&] {
      Tally t(2);
      (*parent)->loop().Post([t, c = *conn, s = *src, key = child->key](Transport&) {
        c->Put(*s->region, 0, key, 0, 64, t.callback(0));
        c->Flush(t.callback(1));
      });
      const Status put = t.Wait(0, Millis(5000));
      return put.ok() ? t.Wait(1, Millis(5000)) : put;
    };
    ASSERT_TRUE(IsOk(put_and_flush()));
    ::kill(child->pid, SIGKILL);
    ::waitpid(child->pid, nullptr, 0);
    Status last;
    ASSERT_TRUE(conformance::WaitUntil(
        [&] {
          last = put_and_flush();
          return !last.ok();
        },
        Millis(15000)));
    EXPECT_EQ(last.code(), StatusCode::kUnavailable) << last.ToString();
    EXPECT_NE(last.message().find("child-process"), std::string::npos) << last.ToString();
    EXPECT_FALSE((*parent)->loop().Call([c = *conn](Transport&) { return c->healthy(); }));
  }
}

TEST(UcxPeer, DroppedConnectionCancelsItsPendingOperations) {
  for (const Config& config : kConfigs) {
    SCOPED_TRACE(config.name);
    auto a = TestPeer::Create(Param(config), "a");
    auto b = TestPeer::Create(Param(config), "b");
    ASSERT_TRUE(a.ok() && b.ok());
    auto src = (*a)->Allocate(1 << 20);
    auto dst = (*b)->Allocate(1 << 20);
    ASSERT_TRUE(src.ok() && dst.ok());
    Tally t(18);
    (*a)->loop().Call([&](Transport& transport) {
      auto conn = transport.Connect((*b)->address(), "b");
      ASSERT_TRUE(IsOk(conn.status()));
      for (size_t i = 0; i < 16; ++i)
        (*conn)->Put(*(*src)->region, i << 16, (*dst)->key, i << 16, 1 << 16, t.callback(i));
      (*conn)->Flush(t.callback(16));
      (*conn)->Send(Bytes(100), t.callback(17));
    });  // the only reference to the connection is gone
    ASSERT_TRUE(t.WaitAll());
    std::this_thread::sleep_for(Millis(50));
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_EQ(t.calls(i), 1) << i;
      EXPECT_EQ(t.status(i).code(), StatusCode::kCancelled) << i << ": " << t.status(i).ToString();
    }
  }
}

TEST(UcxPeer, ConnectionOutlivingItsTransportFailsCleanly) {
  auto b = TestPeer::Create(Param(kConfigs[0]), "b");
  ASSERT_TRUE(b.ok());
  auto a = Param(kConfigs[0]).factory("a");
  ASSERT_TRUE(IsOk(a.status()));
  std::vector<std::byte> memory(64);
  auto region = (*a)->Register(memory.data(), memory.size());
  ASSERT_TRUE(IsOk(region.status()));
  auto conn = (*a)->Connect((*b)->address(), "b");
  ASSERT_TRUE(IsOk(conn.status()));
  a->reset();
  Status status;
  (*conn)->Put(**region, 0, (*region)->remote_key(), 0, 8, [&](const Status& s) { status = s; });
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
  EXPECT_FALSE((*conn)->healthy());
  region->reset();  // after its transport: the context lives on in the region
}

TEST(UcxPeer, LargeAndSmallMessagesArriveInOrder) {
  for (const Config& config : kConfigs) {
    SCOPED_TRACE(config.name);
    auto a = TestPeer::Create(Param(config), "a");
    auto b = TestPeer::Create(Param(config), "b");
    ASSERT_TRUE(a.ok() && b.ok());
    auto conn = (*a)->Connect(**b);
    ASSERT_TRUE(IsOk(conn.status()));
    const size_t sizes[] = {1 << 20, 10, 300 << 10, 1, 100 << 10, 70 << 10, 5, 1 << 20, 2};
    constexpr size_t kRounds = 10, kEach = std::size(sizes);
    Tally sent(kRounds * kEach);
    (*a)->loop().Post([=, c = *conn](Transport&) {
      for (size_t i = 0; i < kRounds * kEach; ++i) {
        Bytes m(sizes[i % kEach]);
        FillPattern(m.data(), m.size(), i);
        c->Send(std::move(m), sent.callback(i));
      }
    });
    ASSERT_TRUE(sent.WaitAll());
    const auto got = (*b)->sink().WaitFor(kRounds * kEach);
    ASSERT_EQ(got.size(), kRounds * kEach);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].bytes.size(), sizes[i % kEach]) << "message " << i;
      ASSERT_TRUE(conformance::HasPattern(got[i].bytes.data(), got[i].bytes.size(), i)) << "message " << i;
    }
  }
}

TEST(UcxPeer, ReceiverRefusesLargeMessagesAboveItsLimitAndKeepsOrder) {
  for (const Config& config : kConfigs) {
    SCOPED_TRACE(config.name);
    auto a = TestPeer::Create(Param(config, 1 << 20), "a");
    auto b = TestPeer::Create(Param(config, 256 << 10), "small-b");
    ASSERT_TRUE(a.ok() && b.ok());
    auto conn = (*a)->Connect(**b);
    ASSERT_TRUE(IsOk(conn.status()));
    Tally sent(3);
    (*a)->loop().Post([sent, c = *conn](Transport&) {
      c->Send(Bytes(10, std::byte{1}), sent.callback(0));
      c->Send(Bytes(1 << 20, std::byte{2}), sent.callback(1));  // above b's limit: rendezvous, refused
      c->Send(Bytes(20, std::byte{3}), sent.callback(2));
    });
    ASSERT_TRUE(sent.WaitAll());
    EXPECT_TRUE(IsOk(sent.status(0)));
    EXPECT_TRUE(conformance::FailsNaming(sent.status(1), "small-b"));
    EXPECT_TRUE(IsOk(sent.status(2)));
    const auto got = (*b)->sink().WaitFor(2);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].bytes, Bytes(10, std::byte{1}));
    EXPECT_EQ(got[1].bytes, Bytes(20, std::byte{3}));
  }
}

}  // namespace
}  // namespace weightport

namespace weightport {
namespace {

// The owner of registered memory applies a software-RMA Put itself (ucp_put_handler) and acknowledges
// each piece. If the initiator dies meanwhile, UCX 1.13 over TCP aborts the OWNER when an
// acknowledgement fails ("ucp_request.inl:346 Fatal: unexpected error: Endpoint timeout"; 3 of 3
// runs here; shm survived). A UCX hazard our code cannot catch, so this is not a unit test: run it
// by name to check another UCX (--gtest_also_run_disabled_tests --gtest_filter='*InitiatorDeath*').
TEST(UcxPeer, DISABLED_OwnerSurvivesInitiatorDeathMidPut) {
  constexpr size_t kSize = size_t{512} << 20;
  for (const Config& config : kConfigs) {
    SCOPED_TRACE(config.name);
    auto owner = TestPeer::Create(Param(config), "owner");
    ASSERT_TRUE(IsOk(owner.status()));
    auto dst = (*owner)->Allocate(kSize);
    ASSERT_TRUE(IsOk(dst.status()));
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // the initiator: puts forever until killed
      auto peer = TestPeer::Create(Param(config), "initiator");
      if (!peer.ok()) ::_exit(1);
      auto src = (*peer)->Allocate(kSize);
      auto conn = (*peer)->Connect((*owner)->address(), "owner");
      if (!src.ok() || !conn.ok()) ::_exit(2);
      for (;;) {
        Tally t(2);
        (*peer)->loop().Post([t, c = *conn, s = *src, key = (*dst)->key](Transport&) {
          c->Put(*s->region, 0, key, 0, kSize, t.callback(0));
          c->Flush(t.callback(1));
        });
        if (!t.Wait(1, Millis(60000)).ok()) ::_exit(3);
      }
    }
    std::this_thread::sleep_for(Millis(300));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    std::this_thread::sleep_for(Millis(2000));  // the owner processes what was in flight
    EXPECT_TRUE((*owner)->loop().Call([](Transport&) { return true; }));
  }
}

}  // namespace
}  // namespace weightport
