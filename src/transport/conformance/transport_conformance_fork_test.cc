// Conformance: two transports in two processes, for backends that can cross a fork().
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "transport/conformance/transport_conformance.h"

namespace weightport::conformance {
namespace {

constexpr uint64_t kSize = (uint64_t{1} << 20) + 5;
constexpr uint64_t kOffset = 3;

bool WriteAll(int fd, const std::byte* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes, or fails once `deadline` passes.
Status ReadAll(int fd, std::byte* p, size_t n, std::chrono::steady_clock::time_point deadline) {
  while (n > 0) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Timeout("no data from the other process in time");
    pollfd pfd{.fd = fd, .events = POLLIN, .revents = 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return ErrnoError("poll", errno);
    if (ready == 0) continue;
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError("read", errno);
    if (r == 0) return Unavailable("the other process closed the socket");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

// Frames: u64 length (host order: both ends are the same binary), then the bytes.
bool WriteFrame(int fd, std::span<const std::byte> bytes) {
  const uint64_t n = bytes.size();
  return WriteAll(fd, reinterpret_cast<const std::byte*>(&n), 8) && WriteAll(fd, bytes.data(), bytes.size());
}
Result<Bytes> ReadFrame(int fd, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  uint64_t n = 0;
  WP_RETURN_IF_ERROR(ReadAll(fd, reinterpret_cast<std::byte*>(&n), 8, deadline));
  if (n > (uint64_t{1} << 20)) return InvalidArgument("frame of " + std::to_string(n) + " bytes");
  Bytes bytes(n);
  WP_RETURN_IF_ERROR(ReadAll(fd, bytes.data(), n, deadline));
  return bytes;
}
Bytes ToBytes(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return Bytes(p, p + s.size());
}

// Child side: receives the parent's address and key, puts pattern 91 into the parent's region,
// reports (an empty frame is success, else the error text), waits for "bye", tears down.
Status ChildRun(const TransportConformanceParam& param, int fd) {
  WP_ASSIGN_OR_RETURN(Bytes address, ReadFrame(fd, kOpTimeout));
  WP_ASSIGN_OR_RETURN(Bytes key_bytes, ReadFrame(fd, kOpTimeout));
  WP_ASSIGN_OR_RETURN(RemoteKey key, RemoteKey::Deserialize(key_bytes, "parent's key"));
  WP_ASSIGN_OR_RETURN(std::unique_ptr<TestPeer> child, TestPeer::Create(param, "child"));
  WP_ASSIGN_OR_RETURN(Buffer * src, child->Allocate(kSize));
  FillPattern(src->data(), kSize, 91);
  WP_ASSIGN_OR_RETURN(Connection * conn, child->Connect(address, "parent"));
  Tally done(2);
  child->loop().Post([=, region = src->region.get()](Transport&) {
    conn->Put(*region, 0, key, kOffset, kSize, done.callback(0));
    conn->Flush(done.callback(1));
  });
  WP_RETURN_IF_ERROR(done.Wait(0));
  WP_RETURN_IF_ERROR(done.Wait(1));
  if (!WriteFrame(fd, {})) return IoError("cannot report to the parent");
  WP_ASSIGN_OR_RETURN(Bytes bye, ReadFrame(fd, kOpTimeout));
  child.reset();
  return Status::Ok();
}

int ChildMain(const TransportConformanceParam& param, int fd) {
  const Status s = ChildRun(param, fd);
  if (s.ok()) return 0;
  WriteFrame(fd, ToBytes(s.ToString()));
  return 1;
}

// Owns the parent's end of the socket and the child: on destruction closes the socket (the child
// then sees EOF and exits) and reaps the child, killing it (that pid only) if it hangs.
class ChildReaper {
 public:
  ChildReaper(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  ~ChildReaper() {
    ::close(fd_);
    if (pid_ > 0) Wait(Millis(10000)).status().IgnoreError();
  }
  // The child's wait status; kTimeout if it had to be killed.
  Result<int> Wait(Millis timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    for (;;) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (r < 0 && errno != EINTR) return ErrnoError("waitpid", errno);
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        pid_ = -1;
        return Timeout("child did not exit within " + std::to_string(timeout.count()) + " ms; killed");
      }
      std::this_thread::sleep_for(Millis(5));
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
  int fd_;
};

TEST_P(TransportConformance, ForkedChildPutsIntoParent) {
  if (!GetParam().supports_fork) GTEST_SKIP() << "backend does not run across processes";
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  std::fflush(nullptr);  // or the child flushes a copy of our buffered output
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::_exit(ChildMain(GetParam(), fds[1]));  // no gtest, no atexit handlers in the child
  }
  ::close(fds[1]);
  const int fd = fds[0];
  ChildReaper reaper(pid, fd);
  WP_ASSERT_OK_AND_ASSIGN(auto parent, Peer("parent"));
  WP_ASSERT_OK_AND_ASSIGN(Buffer * dst, parent->Allocate(kOffset + kSize + 16));
  FillPattern(dst->data(), dst->size, 90);
  ASSERT_TRUE(WriteFrame(fd, parent->address()));
  ASSERT_TRUE(WriteFrame(fd, dst->key.Serialize()));
  WP_ASSERT_OK_AND_ASSIGN(Bytes report, ReadFrame(fd, kLargeTimeout));
  EXPECT_TRUE(report.empty()) << "child: "
                              << std::string(reinterpret_cast<const char*>(report.data()), report.size());
  EXPECT_TRUE(HasPattern(dst->data(), kOffset, 90));
  EXPECT_TRUE(HasPattern(dst->data() + kOffset, kSize, 91));
  EXPECT_TRUE(HasPattern(dst->data() + kOffset + kSize, 16, 90, kOffset + kSize));
  ASSERT_TRUE(WriteFrame(fd, ToBytes("bye")));
  WP_ASSERT_OK_AND_ASSIGN(int status, reaper.Wait(kOpTimeout));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child wait status " << status;
}

}  // namespace
}  // namespace weightport::conformance
