#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "control_test_util.h"
#include "weightport/control/channel.h"
#include "weightport/control/metrics.h"
#include "weightport/control/metrics_server.h"

namespace weightport {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A blocking loopback client socket whose every send and receive gives up after 5 s.
int Connect(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads until the server closes the connection (bounded by 10 s and 10,000 reads).
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  const auto until = Clock::now() + milliseconds(10000);
  for (int i = 0; i < 10000 && Clock::now() < until; ++i) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Sends `request` on a fresh connection and returns everything the server answers.
std::string Exchange(uint16_t port, const std::string& request) {
  int fd = Connect(port);
  EXPECT_GE(fd, 0);
  if (fd < 0) return "";
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::string response = ReadAll(fd);
  close(fd);
  return response;
}

std::string StatusLine(const std::string& response) { return response.substr(0, response.find("\r\n")); }

std::string Body(const std::string& response) {
  size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "<no head end>" : response.substr(end + 4);
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(metrics_.Describe("wp_bytes_total", MetricType::kCounter, "Bytes moved.").ok());
    metrics_.Add("wp_bytes_total", {{"peer", "a"}}, 42);
  }
  std::unique_ptr<MetricsServer> StartServer(MetricsServerOptions options = {}) {
    auto server = MetricsServer::Start("127.0.0.1", 0, metrics_, options);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? std::move(server).value() : nullptr;
  }
  Metrics metrics_;
};

TEST_F(MetricsServerTest, ReportsBoundAddress) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  EXPECT_NE(server->port(), 0);
  EXPECT_EQ(server->address(), "127.0.0.1:" + std::to_string(server->port()));
}

TEST_F(MetricsServerTest, GetMetricsReturnsTheRegistry) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  std::string response = Exchange(server->port(), "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(StatusLine(response), "HTTP/1.1 200 OK");
  EXPECT_NE(response.find("\r\nContent-Type: text/plain; version=0.0.4"), std::string::npos) << response;
  EXPECT_NE(response.find("\r\nConnection: close\r\n"), std::string::npos) << response;
  const std::string expected =
      "# HELP wp_bytes_total Bytes moved.\n# TYPE wp_bytes_total counter\n"
      "wp_bytes_total{peer=\"a\"} 42\n";
  EXPECT_EQ(Body(response), expected);
  EXPECT_NE(response.find("\r\nContent-Length: " + std::to_string(expected.size()) + "\r\n"),
            std::string::npos);

  // Later requests see later updates; a query string and bare-LF line ends are accepted.
  metrics_.Add("wp_bytes_total", {{"peer", "a"}}, 8);
  response = Exchange(server->port(), "GET /metrics?x=1 HTTP/1.0\n\n");
  EXPECT_EQ(StatusLine(response), "HTTP/1.1 200 OK");
  EXPECT_NE(Body(response).find("wp_bytes_total{peer=\"a\"} 50\n"), std::string::npos) << response;
}

TEST_F(MetricsServerTest, HeadHasHeadersOnly) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  std::string response = Exchange(server->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(StatusLine(response), "HTTP/1.1 200 OK");
  EXPECT_EQ(Body(response), "");
}

TEST_F(MetricsServerTest, OtherPathIs404) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(StatusLine(Exchange(server->port(), "GET / HTTP/1.1\r\n\r\n")), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(StatusLine(Exchange(server->port(), "GET /metricsx HTTP/1.1\r\n\r\n")), "HTTP/1.1 404 Not Found");
}

TEST_F(MetricsServerTest, OtherMethodIs405) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  std::string response = Exchange(server->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(StatusLine(response), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_NE(response.find("\r\nAllow: GET, HEAD\r\n"), std::string::npos) << response;
}

TEST_F(MetricsServerTest, MalformedRequestIs400) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(StatusLine(Exchange(server->port(), "GET /metrics\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(StatusLine(Exchange(server->port(), "GET /metrics SPDY/3\r\n\r\n")), "HTTP/1.1 400 Bad Request");
}

TEST_F(MetricsServerTest, OversizeRequestIsRefused) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  std::string request = "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(16 * 1024, 'a') + "\r\n\r\n";
  std::string response = Exchange(server->port(), request);
  EXPECT_EQ(StatusLine(response), "HTTP/1.1 431 Request Header Fields Too Large");
  // The server still serves the next client.
  EXPECT_EQ(StatusLine(Exchange(server->port(), "GET /metrics HTTP/1.1\r\n\r\n")), "HTTP/1.1 200 OK");
}

TEST_F(MetricsServerTest, IncompleteRequestTimesOut) {
  auto server = StartServer({.request_timeout = milliseconds(200)});
  ASSERT_NE(server, nullptr);
  const auto start = Clock::now();
  std::string response = Exchange(server->port(), "GET /metr");
  EXPECT_EQ(StatusLine(response), "HTTP/1.1 408 Request Timeout");
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
}

TEST_F(MetricsServerTest, StopWithSilentClientReturnsPromptly) {
  // A long request timeout: Stop must not wait for it.
  auto server = StartServer({.request_timeout = milliseconds(60000)});
  ASSERT_NE(server, nullptr);
  int fd = Connect(server->port());
  ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(milliseconds(200));  // let the server accept and start waiting
  const auto start = Clock::now();
  server->Stop();
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  EXPECT_EQ(ReadAll(fd), "");  // closed without an answer
  close(fd);
  server->Stop();  // idempotent
  EXPECT_LT(Connect(server->port()), 0) << "still accepting after Stop";
}

TEST_F(MetricsServerTest, PortInUseErrorNamesTheAddress) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto second = MetricsServer::Start("127.0.0.1", server->port(), metrics_);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(server->address()), std::string::npos)
      << second.status().ToString();
  EXPECT_FALSE(MetricsServer::Start("", 0, metrics_).ok());
}

TEST_F(MetricsServerTest, PortTakenByTheControlListenerSaysAddressAlreadyInUse) {
  auto listener = ControlListener::Listen("127.0.0.1", 0, "coord", control_test::MakeSecret('s'));
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  auto second = MetricsServer::Start("127.0.0.1", (*listener)->port(), metrics_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists) << second.status().ToString();
  EXPECT_NE(second.status().message().find("metrics server on " + (*listener)->address() +
                                           ": address already in use"),
            std::string::npos)
      << second.status().ToString();
}

TEST_F(MetricsServerTest, IdleConnectionsDoNotBlockAScrape) {
  // Each idle connection may hold its slot for the whole request timeout; a scrape must not queue
  // behind them.
  auto server = StartServer({.request_timeout = milliseconds(2000)});
  ASSERT_NE(server, nullptr);
  std::vector<int> idle;
  for (int i = 0; i < 66; ++i) {
    int fd = Connect(server->port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(milliseconds(100));  // the server takes them in
  const auto start = Clock::now();
  int fd = Connect(server->port());
  ASSERT_GE(fd, 0);
  timeval tv{1, 0};  // the scrape's timeout
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string request = "GET /metrics HTTP/1.1\r\n\r\n";
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  const std::string response = ReadAll(fd);
  const auto took = Clock::now() - start;
  close(fd);
  for (int i : idle) close(i);
  EXPECT_EQ(StatusLine(response), "HTTP/1.1 200 OK");
  EXPECT_LT(took, milliseconds(1000));
}

TEST_F(MetricsServerTest, ConnectionsBeyondTheBoundCloseTheOldest) {
  auto server = StartServer({.request_timeout = milliseconds(20'000), .max_connections = 4});
  ASSERT_NE(server, nullptr);
  std::vector<int> idle;
  for (int i = 0; i < 5; ++i) {
    idle.push_back(Connect(server->port()));
    ASSERT_GE(idle.back(), 0);
    std::this_thread::sleep_for(milliseconds(50));  // accepted in this order
  }
  timeval tv{1, 0};
  setsockopt(idle[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char c;
  EXPECT_EQ(recv(idle[0], &c, 1, 0), 0) << "the oldest connection was not closed";
  EXPECT_EQ(StatusLine(Exchange(server->port(), "GET /metrics HTTP/1.1\r\n\r\n")), "HTTP/1.1 200 OK");
  for (int i : idle) close(i);
}

}  // namespace
}  // namespace weightport
