#include "weightport/control/joining_peers.h"

#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "control_test_util.h"
#include "weightport/control/handshake.h"

namespace weightport {
namespace {

using Clock = std::chrono::steady_clock;
using control_test::MakeSecret;
using std::chrono::milliseconds;

// Accepts one peer (bounded by count and time).
std::unique_ptr<ControlChannel> AcceptOne(ControlListener& listener) {
  for (int i = 0; i < 50; ++i) {
    auto ch = listener.Accept(milliseconds(100));
    if (ch.ok()) return std::move(*ch);
  }
  return nullptr;
}

TEST(JoiningPeersTest, AMutePeerHoldsUpNoOtherAndTimesOutNamed) {
  const Secret secret = MakeSecret('s');
  auto listener = ControlListener::Listen("127.0.0.1", 0, "coord", secret);
  ASSERT_TRUE(listener.ok());
  auto connect = [&](const char* name) {
    return std::async(std::launch::async, [&, name] {
      return ControlChannel::Connect((*listener)->address(), name, PeerRole::kObserver, secret,
                                     milliseconds(5000));
    });
  };
  auto mute_client = connect("mute");
  std::unique_ptr<ControlChannel> mute = AcceptOne(**listener);
  ASSERT_NE(mute, nullptr);
  auto talker_client = connect("talker");
  std::unique_ptr<ControlChannel> talker = AcceptOne(**listener);
  ASSERT_NE(talker, nullptr);
  auto m = mute_client.get();
  auto t = talker_client.get();
  ASSERT_TRUE(m.ok() && t.ok());

  // The talker must not wait behind the mute peer: it arrives first, alone, well before the mute
  // one's timeout (the check at half of it, so a loaded machine cannot fail it), and the mute one
  // times out after it.
  const auto mute_timeout = milliseconds(2000);
  JoiningPeers joining(mute_timeout);
  joining.Add(std::move(mute));
  joining.Add(std::move(talker));
  EXPECT_TRUE(joining.Take().empty());
  const auto start = Clock::now();
  ASSERT_TRUE((*t)->Send(ByeMsg{}).ok());
  std::vector<JoiningPeers::Arrival> got;
  while (got.empty() && Clock::now() - start < mute_timeout / 2) {
    got = joining.Take();
    if (got.empty()) std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].channel->peer_name(), "talker");
  ASSERT_TRUE(got[0].first.ok());
  EXPECT_EQ(got[0].first->type, MessageType::kBye);

  got.clear();
  for (int i = 0; i < 1000 && got.empty(); ++i) {  // up to 10 s: the mute one's 2 s timeout, loaded
    got = joining.Take();
    if (got.empty()) std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first.status().code(), StatusCode::kTimeout);
  EXPECT_NE(got[0].first.status().message().find("'mute' at 127.0.0.1:"), std::string::npos)
      << got[0].first.status().ToString();
  EXPECT_TRUE(joining.empty());
}

}  // namespace
}  // namespace weightport
