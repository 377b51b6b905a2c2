#include "weightport/control/channel.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "control_test_util.h"
#include "weightport/control/handshake.h"
#include "weightport/control/pubsub_messages.h"
#include "weightport/control/version_messages.h"
#include "weightport/core/printable.h"

namespace weightport {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kWait(5000);

using control_test::LogCapture;
using control_test::MakeSecret;

struct Fixture {
  LogCapture server_log;
  std::unique_ptr<ControlListener> listener;
  explicit Fixture(const Secret& secret, uint32_t max_payload = kDefaultMaxPayload) {
    ControlOptions options;
    options.log = server_log.Sink();
    options.max_payload = max_payload;
    options.handshake_timeout = milliseconds(2000);
    auto l = ControlListener::Listen("127.0.0.1", 0, "coord", secret, options);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    listener = std::move(*l);
  }
  std::future<Result<std::unique_ptr<ControlChannel>>> AcceptAsync() {
    return std::async(std::launch::async, [this] { return listener->Accept(kWait); });
  }
};

// A plain-socket client that speaks the protocol by hand, to send frames a real channel never would.
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval tv{2, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~RawClient() { close(fd_); }
  void Write(ByteView bytes) {
    ASSERT_EQ(send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  }
  Bytes Frame(MessageType type, ByteView payload, ByteView key) {
    return *EncodeFrame(type, seq_++, payload, key);
  }
  void Send(MessageType type, ByteView payload, ByteView key) { Write(Frame(type, payload, key)); }
  // Reads one frame; an error when the server closed the connection first.
  Result<weightport::Frame> Read(ByteView key) {
    Bytes header(kFrameHeaderSize);
    if (!ReadExactly(header)) return Unavailable("closed");
    auto h = DecodeFrameHeader(header, kDefaultMaxPayload);
    if (!h.ok()) return h.status();
    Bytes rest(h->payload_size + kFrameMacSize);
    if (!ReadExactly(rest)) return Unavailable("closed");
    header.insert(header.end(), rest.begin(), rest.end());
    return DecodeFrame(header, key, rseq_++);
  }
  // Completes the handshake as subscriber `name`; returns the session key.
  Digest Handshake(const Secret& secret, const std::string& name) {
    Send(MessageType::kHello, HelloMsg{PeerRole::kSubscriber, name}.Encode(), kHandshakeKey);
    auto challenge = ChallengeMsg::Decode(Read(kHandshakeKey)->payload);
    Nonce nc = *RandomNonce();
    Send(MessageType::kProof, ProofMsg{nc, *ClientProof(secret, challenge->server_nonce, nc, name)}.Encode(),
         kHandshakeKey);
    EXPECT_EQ(Read(kHandshakeKey)->type, MessageType::kWelcome);
    return *SessionKey(secret, challenge->server_nonce, nc);
  }
  bool ReadExactly(Bytes& out) {
    size_t got = 0;
    while (got < out.size()) {
      ssize_t n = recv(fd_, out.data() + got, out.size() - got, 0);
      if (n <= 0) return false;
      got += size_t(n);
    }
    return true;
  }
  bool PeerClosed() {  // true once the server shut the connection (after any pending frames)
    std::byte b[4096];
    while (true) {
      ssize_t n = recv(fd_, b, sizeof(b), 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
      if (n < 0) return false;  // timed out: still open
    }
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  uint64_t seq_ = 0;
  uint64_t rseq_ = 0;
};

TEST(ControlChannelTest, HappyPathBothDirections) {
  const Secret secret = MakeSecret('s');
  Fixture f(secret);
  EXPECT_NE(f.listener->port(), 0);
  auto accepted = f.AcceptAsync();
  auto client = ControlChannel::Connect(f.listener->address(), "sub-2", PeerRole::kSubscriber, secret, kWait);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto server = accepted.get();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ((*client)->peer(), "coordinator 'coord' at " + f.listener->address());
  EXPECT_EQ((*server)->peer_name(), "sub-2");
  EXPECT_NE((*server)->peer().find("subscriber 'sub-2' at 127.0.0.1:"), std::string::npos);

  ASSERT_TRUE((*client)->Send(ChunksVerifiedMsg{7, 99}).ok());
  auto got = (*server)->Receive(kWait);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->type, MessageType::kChunksVerified);
  EXPECT_EQ(*ChunksVerifiedMsg::Decode(got->payload), (ChunksVerifiedMsg{7, 99}));

  ASSERT_TRUE((*server)->Send(CommitMsg{7}).ok());
  auto commit = (*client)->Receive(kWait);
  ASSERT_TRUE(commit.ok()) << commit.status().ToString();
  EXPECT_EQ(*CommitMsg::Decode(commit->payload), CommitMsg{7});
  EXPECT_TRUE(f.server_log.lines.empty());
}

// A peer that refuses this end sends its reason, then closes. A Send racing with that close (a
// heartbeat) fails, but must not throw the reason away: Receive still returns it.
TEST(ControlChannelTest, AFailedSendLeavesTheRefusalReadable) {
  const Secret secret = MakeSecret('s');
  Fixture f(secret);
  auto accepted = f.AcceptAsync();
  auto client = ControlChannel::Connect(f.listener->address(), "sub-3", PeerRole::kSubscriber, secret, kWait);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto server = accepted.get();
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE((*server)->Send(RefusedMsg{"tensor 'x' does not exist"}).ok());
  (*server)->Close();
  Status sent;
  for (int i = 0; i < 200 && sent.ok(); ++i) {  // until the closed end makes a send fail
    sent = (*client)->Send(HeartbeatMsg{});
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_FALSE(sent.ok());
  EXPECT_FALSE((*client)->Send(HeartbeatMsg{}).ok());
  auto got = (*client)->Receive(kWait);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("tensor 'x' does not exist"), std::string::npos)
      << got.status().ToString();
}

// Goodbye returns only once the peer has read the Bye and closed its end (what lets a successor
// with the same name in right after), and reads past messages still in flight; a peer that never
// closes costs exactly the timeout.
TEST(ControlChannelTest, GoodbyeWaitsForThePeerToCloseAndTimesOutWhenItDoesNot) {
  const Secret secret = MakeSecret('s');
  Fixture f(secret);
  for (const bool peer_closes : {true, false}) {
    auto accepted = f.AcceptAsync();
    auto client = ControlChannel::Connect(f.listener->address(), "pub", PeerRole::kPublisher, secret, kWait);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    auto server = accepted.get();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    ASSERT_TRUE((*server)->Send(HeartbeatMsg{}).ok());  // in flight when the client says Bye
    std::atomic<bool> saw_bye{false};
    std::thread peer([&] {
      auto m = (*server)->Receive(kWait);
      saw_bye.store(m.ok() && m->type == MessageType::kBye);
      if (peer_closes) (*server)->Close();
    });
    Status done = (*client)->Goodbye(milliseconds(300));
    peer.join();
    EXPECT_TRUE(saw_bye.load());
    EXPECT_TRUE((*client)->closed());
    if (peer_closes) {
      EXPECT_TRUE(done.ok()) << done.ToString();
    } else {
      EXPECT_EQ(done.code(), StatusCode::kTimeout) << done.ToString();
      EXPECT_NE(done.message().find("did not close"), std::string::npos) << done.ToString();
    }
  }
}

TEST(ControlChannelTest, WrongSecretRefusedOnBothSides) {
  Fixture f(MakeSecret('s'));
  LogCapture client_log;
  ControlOptions options;
  options.log = client_log.Sink();
  auto accepted = f.AcceptAsync();
  auto client = ControlChannel::Connect(f.listener->address(), "sub-1", PeerRole::kSubscriber,
                                        MakeSecret('x'), kWait, options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(client.status().message().find("refused"), std::string::npos) << client.status().ToString();
  auto server = accepted.get();
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(server.status().message().find("subscriber 'sub-1' at 127.0.0.1:"), std::string::npos);
  EXPECT_TRUE(f.server_log.Contains("refused subscriber 'sub-1' at 127.0.0.1:"));
  EXPECT_TRUE(client_log.Contains("authentication failed"));
}

// A rogue coordinator that does not know the secret cannot complete the client's handshake.
TEST(ControlChannelTest, ClientRefusesServerWithoutTheSecret) {
  // A raw server on a plain socket bound to a fresh port.
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(lfd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread rogue([&] {
    int fd = accept(lfd, nullptr, nullptr);
    Bytes buf(4096);
    recv(fd, buf.data(), buf.size(), 0);  // Hello
    Bytes c = *EncodeFrame(MessageType::kChallenge, 0, ChallengeMsg{}.Encode(), kHandshakeKey);
    send(fd, c.data(), c.size(), MSG_NOSIGNAL);
    recv(fd, buf.data(), buf.size(), 0);  // Proof
    Bytes w = *EncodeFrame(MessageType::kWelcome, 1, WelcomeMsg{"rogue", {}}.Encode(), kHandshakeKey);
    send(fd, w.data(), w.size(), MSG_NOSIGNAL);
    while (recv(fd, buf.data(), buf.size(), 0) > 0) {
    }
    close(fd);
  });
  LogCapture client_log;
  ControlOptions options;
  options.log = client_log.Sink();
  auto client = ControlChannel::Connect("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)), "sub-1",
                                        PeerRole::kSubscriber, MakeSecret('s'), kWait, options);
  rogue.join();
  close(lfd);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(client.status().message().find("coordinator 'rogue' at 127.0.0.1:"), std::string::npos);
  EXPECT_TRUE(client_log.Contains("refused coordinator 'rogue'"));
}

TEST(ControlChannelTest, GarbageInsteadOfProofRefused) {
  Fixture f(MakeSecret('s'));
  auto accepted = f.AcceptAsync();
  RawClient raw(f.listener->port());
  raw.Send(MessageType::kHello, HelloMsg{PeerRole::kPublisher, "pub-0"}.Encode(), kHandshakeKey);
  ASSERT_TRUE(raw.Read(kHandshakeKey).ok());
  raw.Write(Bytes(100, std::byte{0x5a}));
  auto server = accepted.get();
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(f.server_log.Contains("refused publisher 'pub-0' at 127.0.0.1:"));
  EXPECT_TRUE(raw.PeerClosed());
}

// A refusal can arrive before the peer has proved anything: its reason reaches the log escaped, so
// no raw byte (a newline that forges a log line, invalid UTF-8 that breaks a JSON log) gets through.
TEST(ControlChannelTest, AnUnauthenticatedRefusalIsLoggedEscaped) {
  const Secret secret = MakeSecret('s');
  Fixture f(secret);
  auto accepted = f.AcceptAsync();
  RawClient raw(f.listener->port());
  const std::string reason = "\xff\xfe\n{\"event\":\"version\",\"committed\":true}";
  raw.Write(raw.Frame(MessageType::kRefused, RefusedMsg{reason}.Encode(), kHandshakeKey));
  auto server = accepted.get();
  ASSERT_FALSE(server.ok());
  EXPECT_TRUE(f.server_log.Contains("\\xff\\xfe\\x0a{\"event\":\"version\",\"committed\":true}"));
  std::lock_guard<std::mutex> lock(f.server_log.mu);
  for (const std::string& line : f.server_log.lines)
    EXPECT_TRUE(IsPrintableAscii(line)) << "a raw byte reached the log: " << line;
}

TEST(ControlChannelTest, TamperedFrameRefused) {
  const Secret secret = MakeSecret('s');
  Fixture f(secret);
  auto accepted = f.AcceptAsync();
  RawClient raw(f.listener->port());
  Digest key = raw.Handshake(secret, "sub-3");
  auto server = accepted.get();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Bytes frame = raw.Frame(MessageType::kCommit, CommitMsg{1}.Encode(), key);
  frame[kFrameHeaderSize] ^= std::byte{1};  // flip a payload bit
  raw.Write(frame);
  auto got = (*server)->Receive(kWait);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(got.status().message().find("subscriber 'sub-3' at 127.0.0.1:"), std::string::npos);
  EXPECT_NE(got.status().message().find("MAC"), std::string::npos) << got.status().ToString();
  EXPECT_TRUE(f.server_log.Contains("refused subscriber 'sub-3'"));
  // The peer is told, under the session key, and the connection closes.
  auto refused = raw.Read(key);
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_EQ(refused->type, MessageType::kRefused);
  EXPECT_TRUE(raw.PeerClosed());
  EXPECT_EQ((*server)->Receive(milliseconds(10)).status().code(), StatusCode::kFailedPrecondition);
}

TEST(ControlChannelTest, ReplayedFrameRefused) {
  const Secret secret = MakeSecret('s');
  Fixture f(secret);
  auto accepted = f.AcceptAsync();
  RawClient raw(f.listener->port());
  Digest key = raw.Handshake(secret, "sub-4");
  auto server = accepted.get();
  ASSERT_TRUE(server.ok());
  Bytes frame = raw.Frame(MessageType::kCommit, CommitMsg{1}.Encode(), key);
  raw.Write(frame);
  raw.Write(frame);  // the same bytes again
  ASSERT_TRUE((*server)->Receive(kWait).ok());
  auto replay = (*server)->Receive(kWait);
  ASSERT_FALSE(replay.ok());
  EXPECT_NE(replay.status().message().find("replayed"), std::string::npos) << replay.status().ToString();
  EXPECT_TRUE(f.server_log.Contains("refused subscriber 'sub-4'"));
}

TEST(ControlChannelTest, OversizedLengthRefusedBeforeAllocating) {
  const Secret secret = MakeSecret('s');
  Fixture f(secret, /*max_payload=*/1024);
  auto accepted = f.AcceptAsync();
  RawClient raw(f.listener->port());
  Digest key = raw.Handshake(secret, "sub-5");
  auto server = accepted.get();
  ASSERT_TRUE(server.ok());
  // Only a header announcing ~4 GiB: were it allocated, ASan would report it (and the test would hang
  // waiting for the payload instead of failing fast).
  Bytes header = {std::byte{0xf0}, std::byte{0xff}, std::byte{0xff}, std::byte{0xff},
                  std::byte{static_cast<uint8_t>(MessageType::kManifest)}};
  header.resize(kFrameHeaderSize, std::byte{0});
  header[5] = std::byte{0};
  raw.Write(header);
  const auto start = std::chrono::steady_clock::now();
  auto got = (*server)->Receive(kWait);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("exceeds the 1024-byte limit"), std::string::npos)
      << got.status().ToString();
  EXPECT_TRUE(f.server_log.Contains("refused subscriber 'sub-5'"));
  (void)key;
}

TEST(ControlChannelTest, PeerClosingMidFrameIsUnavailableNamingPeer) {
  const Secret secret = MakeSecret('s');
  Fixture f(secret);
  auto accepted = f.AcceptAsync();
  auto raw = std::make_unique<RawClient>(f.listener->port());
  Digest key = raw->Handshake(secret, "sub-6");
  auto server = accepted.get();
  ASSERT_TRUE(server.ok());
  Bytes frame = raw->Frame(MessageType::kManifest, ManifestMsg{"{}"}.Encode(), key);
  raw->Write(ByteView(frame).first(frame.size() / 2));
  raw.reset();  // closes the socket
  auto got = (*server)->Receive(kWait);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("subscriber 'sub-6' at 127.0.0.1:"), std::string::npos);
  EXPECT_NE(got.status().message().find("mid-frame"), std::string::npos) << got.status().ToString();
}

TEST(ControlChannelTest, ReceiveTimeoutIsHonouredAndResumable) {
  const Secret secret = MakeSecret('s');
  Fixture f(secret);
  auto accepted = f.AcceptAsync();
  auto client = ControlChannel::Connect(f.listener->address(), "obs", PeerRole::kObserver, secret, kWait);
  ASSERT_TRUE(client.ok());
  auto server = accepted.get();
  ASSERT_TRUE(server.ok());
  const auto start = std::chrono::steady_clock::now();
  auto got = (*client)->Receive(milliseconds(100));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kTimeout);
  EXPECT_NE(got.status().message().find("coordinator 'coord'"), std::string::npos);
  EXPECT_GE(elapsed, milliseconds(95));
  EXPECT_LT(elapsed, milliseconds(1000));
  // Still usable after a timeout.
  ASSERT_TRUE((*server)->Send(HeartbeatMsg{}).ok());
  auto hb = (*client)->Receive(kWait);
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  EXPECT_EQ(hb->type, MessageType::kHeartbeat);
}

TEST(ControlChannelTest, ThousandMessagesArriveInOrder) {
  const Secret secret = MakeSecret('s');
  Fixture f(secret);
  auto accepted = f.AcceptAsync();
  auto client = ControlChannel::Connect(f.listener->address(), "pub-1", PeerRole::kPublisher, secret, kWait);
  ASSERT_TRUE(client.ok());
  auto server = accepted.get();
  ASSERT_TRUE(server.ok());
  constexpr uint64_t kCount = 1000;
  std::thread sender([&] {
    for (uint64_t i = 0; i < kCount; ++i) ASSERT_TRUE((*client)->Send(ChunksVerifiedMsg{1, i}).ok());
    ASSERT_TRUE((*client)->Send(ByeMsg{}).ok());
  });
  for (uint64_t i = 0; i < kCount; ++i) {
    auto got = (*server)->Receive(kWait);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    auto msg = ChunksVerifiedMsg::Decode(got->payload);
    ASSERT_TRUE(msg.ok());
    ASSERT_EQ(msg->count, i);
  }
  auto bye = (*server)->Receive(kWait);
  sender.join();
  ASSERT_TRUE(bye.ok());
  EXPECT_EQ(bye->type, MessageType::kBye);
  (*client)->Close();
  auto closed = (*server)->Receive(kWait);
  EXPECT_EQ(closed.status().code(), StatusCode::kUnavailable);
}

TEST(ControlChannelTest, AcceptAndConnectTimeOutAndRefuseBadAddresses) {
  Fixture f(MakeSecret('s'));
  auto none = f.listener->Accept(milliseconds(50));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kTimeout);
  EXPECT_FALSE(ControlChannel::Connect("no-port", "a", PeerRole::kObserver, MakeSecret('s'), kWait).ok());
  EXPECT_FALSE(ControlChannel::Connect(f.listener->address(), "bad name\n", PeerRole::kObserver,
                                       MakeSecret('s'), kWait)
                   .ok());
}

}  // namespace
}  // namespace weightport
