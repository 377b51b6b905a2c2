// A quick throughput measurement, not a unit test (DISABLED_: run it by name with
// --gtest_also_run_disabled_tests --gtest_filter='*UcxBench*'). Two processes: a forked child owns
// the target region and runs its progress loop; the parent times Put+Flush and Get of 256 MiB and
// 1 GiB over shm and TCP, into registered memory and into memory allocated by UCX, next to memcpy.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>

#include "transport/conformance/transport_conformance.h"
#include "weightport/transport/ucx_transport.h"

namespace weightport {
namespace {

using conformance::IsOk;
using conformance::Tally;
using conformance::TestPeer;
using conformance::TransportConformanceParam;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int kRounds = 3;

TransportConformanceParam Param(std::vector<std::string> transports) {
  TransportConformanceParam param;
  param.name = "bench";
  param.factory = [=](const std::string& name) {
    UcxOptions options;
    options.name = name;
    options.transports = transports;
    return MakeUcxTransport(options);
  };
  return param;
}

bool WriteFrame(int fd, const Bytes& bytes) {
  const uint64_t n = bytes.size();
  return ::write(fd, &n, 8) == 8 && ::write(fd, bytes.data(), n) == static_cast<ssize_t>(n);
}
Bytes ReadFrame(int fd) {
  uint64_t n = 0;
  if (::read(fd, &n, 8) != 8) return {};
  Bytes bytes(n);
  for (size_t got = 0; got < n;) {
    const ssize_t r = ::read(fd, bytes.data() + got, n - got);
    if (r <= 0) return {};
    got += static_cast<size_t>(r);
  }
  return bytes;
}

// The child: a target region of `size` bytes (registered, or allocated by UCX), until "bye".
int TargetMain(const TransportConformanceParam& param, uint64_t size, bool allocate, int fd) {
  auto peer = TestPeer::Create(param, "target");
  if (!peer.ok()) return 1;
  std::unique_ptr<std::byte[]> memory;
  std::unique_ptr<MemoryRegion> region;
  Status status = (*peer)->loop().Call([&](Transport& t) {
    if (allocate) {
      WP_ASSIGN_OR_RETURN(region, UcxAllocate(t, size));
    } else {
      memory.reset(new std::byte[size]);
      WP_ASSIGN_OR_RETURN(region, t.Register(memory.get(), size));
    }
    std::memset(region->data(), 1, size);  // the owner touched its memory, as a real arena would be
    return Status::Ok();
  });
  if (!status.ok()) return 2;
  WriteFrame(fd, (*peer)->address());
  WriteFrame(fd, region->remote_key().Serialize());
  ReadFrame(fd);  // "bye"
  (*peer)->loop().Call([&](Transport&) { region.reset(); });
  (*peer)->Destroy();
  return 0;
}

double GBps(uint64_t bytes, Clock::duration d) {
  return bytes / std::chrono::duration<double>(d).count() / 1e9;
}

void Measure(const std::string& label, const std::vector<std::string>& transports, uint64_t size,
             bool allocate) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::_exit(TargetMain(Param(transports), size, allocate, fds[1]));
  }
  ::close(fds[1]);
  const Bytes address = ReadFrame(fds[0]);
  auto key = RemoteKey::Deserialize(ReadFrame(fds[0]), "target key");
  ASSERT_TRUE(IsOk(key.status()));
  {
    auto peer = TestPeer::Create(Param(transports), "initiator");
    ASSERT_TRUE(IsOk(peer.status()));
    auto src = (*peer)->Allocate(size);
    ASSERT_TRUE(IsOk(src.status()));
    std::memset((*src)->data(), 2, size);
    auto conn = (*peer)->Connect(address, "target");
    ASSERT_TRUE(IsOk(conn.status()));
    for (bool put : {true, false}) {
      std::string times;
      double best = 0;
      for (int round = 0; round < kRounds; ++round) {
        Tally done(2);
        const auto start = Clock::now();
        (*peer)->loop().Post([=, c = *conn, s = *src, k = *key](Transport&) {
          if (put) {
            c->Put(*s->region, 0, k, 0, size, done.callback(0));
          } else {
            c->Get(*s->region, 0, k, 0, size, done.callback(0));
          }
          c->Flush(done.callback(1));
        });
        ASSERT_TRUE(IsOk(done.Wait(0, conformance::kLargeTimeout)));
        ASSERT_TRUE(IsOk(done.Wait(1, conformance::kLargeTimeout)));
        const double rate = GBps(size, Clock::now() - start);
        best = std::max(best, rate);
        char text[32];
        std::snprintf(text, sizeof text, "%s%.2f", round ? " " : "", rate);
        times += text;
      }
      std::printf("%-32s %-3s %5lu MiB: best %6.2f GB/s (rounds: %s)\n", label.c_str(), put ? "put" : "get",
                  static_cast<unsigned long>(size / kMiB), best, times.c_str());
    }
    (*peer)->Destroy();
  }
  WriteFrame(fds[0], Bytes(3));
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(fds[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

void Memcpy(uint64_t size) {
  std::unique_ptr<std::byte[]> a(new std::byte[size]), b(new std::byte[size]);
  std::memset(a.get(), 1, size);
  std::memset(b.get(), 2, size);
  double best = 0;
  for (int round = 0; round < kRounds; ++round) {
    const auto start = Clock::now();
    std::memcpy(b.get(), a.get(), size);
    best = std::max(best, GBps(size, Clock::now() - start));
  }
  std::printf("%-32s     %5lu MiB: best %6.2f GB/s\n", "memcpy (one process)",
              static_cast<unsigned long>(size / kMiB), best);
}

TEST(UcxBench, DISABLED_PutGetThroughput) {
  const std::vector<std::string> shm = {"posix", "sysv", "cma", "self"}, tcp = {"tcp"};
  for (uint64_t size : {256 * kMiB, 1024 * kMiB}) {
    Memcpy(size);
    Measure("shm, registered target", shm, size, false);
    Measure("shm, UCX-allocated target", shm, size, true);
    Measure("tcp, registered target", tcp, size, false);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace weightport
