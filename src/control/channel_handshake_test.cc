// The handshake against peers that are not weightport, or that lie about frame sizes before
// authenticating.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "control_test_util.h"
#include "weightport/control/channel.h"
#include "weightport/control/metrics.h"
#include "weightport/control/metrics_server.h"

namespace weightport {
namespace {

using Clock = std::chrono::steady_clock;
using control_test::LogCapture;
using control_test::MakeSecret;
using std::chrono::milliseconds;

int ConnectRaw(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

std::unique_ptr<ControlListener> MakeListener(LogCapture& log) {
  ControlOptions options;
  options.log = log.Sink();
  options.handshake_timeout = milliseconds(5000);
  auto l = ControlListener::Listen("127.0.0.1", 0, "coord", MakeSecret('s'), options);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? std::move(*l) : nullptr;
}

TEST(ControlHandshakeTest, ConnectingToAnHttpServerSaysThePeerIsNotWeightport) {
  Metrics metrics;
  auto http = MetricsServer::Start("127.0.0.1", 0, metrics, {.request_timeout = milliseconds(300)});
  ASSERT_TRUE(http.ok()) << http.status().ToString();
  auto ch = ControlChannel::Connect((*http)->address(), "sub-1", PeerRole::kSubscriber, MakeSecret('s'),
                                    milliseconds(5000));
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kInvalidArgument) << ch.status().ToString();
  EXPECT_NE(ch.status().message().find("peer at " + (*http)->address() +
                                       " does not speak the weightport control protocol (got 'HTTP/1.1 "),
            std::string::npos)
      << ch.status().ToString();
}

TEST(ControlHandshakeTest, AnHttpClientAtTheListenerIsReportedAsNotWeightport) {
  LogCapture log;
  auto listener = MakeListener(log);
  ASSERT_NE(listener, nullptr);
  int fd = ConnectRaw(listener->port());
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  auto ch = listener->Accept(milliseconds(2000));
  close(fd);
  ASSERT_FALSE(ch.ok());
  EXPECT_NE(ch.status().message().find(
                "does not speak the weightport control protocol (got 'GET /metrics HTTP/1.1')"),
            std::string::npos)
      << ch.status().ToString();
  EXPECT_TRUE(log.Contains("does not speak the weightport control protocol"));
}

TEST(ControlHandshakeTest, AnUnauthenticatedFrameLengthIsBoundedBeforeAllocating) {
  // Before the handshake, no message is larger than a Refused reason: a header announcing 1 MiB
  // (well under max_payload) is refused at once, not buffered while the peer trickles bytes.
  LogCapture log;
  auto listener = MakeListener(log);
  ASSERT_NE(listener, nullptr);
  int fd = ConnectRaw(listener->port());
  Bytes header(kFrameHeaderSize, std::byte{0});
  header[2] = std::byte{0x10};  // 1 MiB, little-endian
  header[4] = std::byte{static_cast<uint8_t>(MessageType::kHello)};
  ASSERT_EQ(send(fd, header.data(), header.size(), MSG_NOSIGNAL), static_cast<ssize_t>(header.size()));
  const auto start = Clock::now();
  auto ch = listener->Accept(milliseconds(3000));
  const auto took = Clock::now() - start;
  close(fd);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kInvalidArgument) << ch.status().ToString();
  EXPECT_NE(ch.status().message().find("exceeds the 8192-byte limit"), std::string::npos)
      << ch.status().ToString();
  EXPECT_LT(took, milliseconds(1000));
}

}  // namespace
}  // namespace weightport
