// ControlListener against hostile connections: silent sockets, too many of them, a taken port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "control_test_util.h"
#include "weightport/control/channel.h"

namespace weightport {
namespace {

using Clock = std::chrono::steady_clock;
using control_test::IdleSocket;
using control_test::LogCapture;
using control_test::MakeSecret;
using std::chrono::milliseconds;

std::unique_ptr<ControlListener> MakeListener(const Secret& secret, LogCapture& log, milliseconds handshake) {
  ControlOptions options;
  options.log = log.Sink();
  options.handshake_timeout = handshake;
  auto l = ControlListener::Listen("127.0.0.1", 0, "coord", secret, options);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? std::move(*l) : nullptr;
}

// Calls Accept the way the coordinator's loop does (short waits) until a channel arrives or
// `budget` passes. Bounded by count and time.
Result<std::unique_ptr<ControlChannel>> AcceptWithin(ControlListener& listener, milliseconds budget) {
  const auto until = Clock::now() + budget;
  for (int i = 0; i < 10'000 && Clock::now() < until; ++i) {
    auto ch = listener.Accept(milliseconds(100));
    if (ch.ok()) return ch;
  }
  return Timeout("no channel accepted");
}

TEST(ControlListenerTest, TwoHundredIdleSocketsDoNotLockOutARealPeer) {
  const Secret secret = MakeSecret('s');
  LogCapture log;
  auto listener = MakeListener(secret, log, milliseconds(5000));
  ASSERT_NE(listener, nullptr);
  std::vector<std::unique_ptr<IdleSocket>> idle;
  for (int i = 0; i < 200; ++i) idle.push_back(std::make_unique<IdleSocket>(listener->port()));
  auto accepted = std::async(std::launch::async, [&] { return AcceptWithin(*listener, milliseconds(8000)); });
  const auto start = Clock::now();
  auto client = ControlChannel::Connect(listener->address(), "sub-1", PeerRole::kSubscriber, secret,
                                        milliseconds(2000));
  const auto took = Clock::now() - start;
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_LT(took, milliseconds(2000));
  auto server = accepted.get();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ((*server)->peer_name(), "sub-1");
}

TEST(ControlListenerTest, AcceptKeepsItsTimeoutWhileIdleSocketsWait) {
  // The coordinator beats hearts and checks deadlines between Accept calls: Accept must return
  // within its own timeout, whatever silent connections are doing.
  const Secret secret = MakeSecret('s');
  LogCapture log;
  // Silent sockets could hold Accept for the 20 s handshake timeout; the check is at half of it, so
  // that a loaded machine cannot fail it while the bug always would.
  const auto handshake_timeout = milliseconds(20'000);
  auto listener = MakeListener(secret, log, handshake_timeout);
  ASSERT_NE(listener, nullptr);
  std::vector<std::unique_ptr<IdleSocket>> idle;
  for (int i = 0; i < 6; ++i) idle.push_back(std::make_unique<IdleSocket>(listener->port()));
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    auto none = listener->Accept(milliseconds(100));
    const auto took = Clock::now() - start;
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.status().code(), StatusCode::kTimeout) << none.status().ToString();
    EXPECT_LT(took, handshake_timeout / 2) << "Accept call " << i;
  }
}

TEST(ControlListenerTest, ConnectionsBeyondTheCapCloseTheOldestAndARealPeerGetsIn) {
  const Secret secret = MakeSecret('s');
  LogCapture log;
  // A handshake timeout far beyond the test's waits: only the cap can close the first socket.
  auto listener = MakeListener(secret, log, milliseconds(20'000));
  ASSERT_NE(listener, nullptr);
  constexpr int kCap = 64;  // ControlOptions::max_pending_handshakes by default
  std::vector<std::unique_ptr<IdleSocket>> idle;
  for (int i = 0; i < kCap; ++i) idle.push_back(std::make_unique<IdleSocket>(listener->port()));
  auto accepted = std::async(std::launch::async, [&] { return AcceptWithin(*listener, milliseconds(3000)); });
  std::this_thread::sleep_for(milliseconds(200));  // the listener takes in the first kCap
  idle.push_back(std::make_unique<IdleSocket>(listener->port()));
  EXPECT_TRUE(idle[0]->ClosedByServer(milliseconds(1000))) << "the oldest idle connection was not closed";
  EXPECT_FALSE(idle[1]->ClosedByServer(milliseconds(0)));
  auto client = ControlChannel::Connect(listener->address(), "sub-1", PeerRole::kSubscriber, secret,
                                        milliseconds(2000));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto server = accepted.get();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_TRUE(log.Contains("handshakes in progress")) << "the eviction was not reported";
}

TEST(ControlListenerTest, ATakenPortIsNamedAsAddressAlreadyInUse) {
  const Secret secret = MakeSecret('s');
  LogCapture log;
  auto first = MakeListener(secret, log, milliseconds(1000));
  ASSERT_NE(first, nullptr);
  auto second = ControlListener::Listen("127.0.0.1", first->port(), "coord", secret);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists) << second.status().ToString();
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(first->port()) +
                                           ": address already in use"),
            std::string::npos)
      << second.status().ToString();
}

}  // namespace
}  // namespace weightport
