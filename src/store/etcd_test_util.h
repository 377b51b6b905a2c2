// Test helpers: a real etcd of the tests' own, on loopback ports nobody else uses, with a data
// folder of its own; and a fixture that starts one per test or skips the test where etcd is not
// installed (Debian etcd-server; scripts/setup installs it).
//
//   store_test::EtcdServer etcd;
//   ASSERT_TRUE(etcd.Start().ok());
//   auto client = EtcdClient::Create(etcd.endpoint());
//   etcd.Kill();     // SIGKILL: a crash; the data folder stays
//   etcd.Restart();  // the same data folder and ports
//
// Thread-safety: an EtcdServer is used from one thread.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "weightport/core/status.h"
#include "weightport/store/etcd_client.h"

namespace weightport::store_test {

inline constexpr char kEtcdBinary[] = "/usr/bin/etcd";
// The tests' patience: how long etcd may take to start on a loaded machine, and to stop.
inline constexpr std::chrono::seconds kEtcdStartTimeout{60};
inline constexpr std::chrono::seconds kEtcdStopTimeout{10};

// A free TCP port on 127.0.0.1 (bound and released: free when asked, almost surely free after).
inline Result<uint16_t> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    close(fd);
    return ErrnoError("bind 127.0.0.1:0", err);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

class EtcdServer {
 public:
  explicit EtcdServer(std::string binary = kEtcdBinary) : binary_(std::move(binary)) {}
  ~EtcdServer() {
    Stop().IgnoreError();
    if (!root_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(root_, ec);
    }
  }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  static bool Installed(const std::string& binary = kEtcdBinary) { return access(binary.c_str(), X_OK) == 0; }

  // Picks two free loopback ports and a fresh data folder, starts etcd, and waits until it answers.
  Status Start() {
    if (pid_ > 0) return FailedPrecondition("etcd is running");
    if (root_.empty()) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "weightport-etcd-XXXXXX").string();
      if (mkdtemp(tmpl.data()) == nullptr) return ErrnoError("mkdtemp " + tmpl, errno);
      root_ = tmpl;
      WP_ASSIGN_OR_RETURN(client_port_, FreeLoopbackPort());
      WP_ASSIGN_OR_RETURN(peer_port_, FreeLoopbackPort());
    }
    return Launch();
  }
  // Starts etcd again on the same data folder and ports, after Kill or Stop.
  Status Restart() {
    if (root_.empty()) return FailedPrecondition("etcd was never started");
    if (pid_ > 0) return FailedPrecondition("etcd is running");
    return Launch();
  }
  // SIGKILL, as a crash: nothing is flushed beyond what etcd already wrote.
  Status Kill() { return Signal(SIGKILL, std::chrono::seconds(0)); }
  // SIGTERM, then SIGKILL when it has not exited within kEtcdStopTimeout. Idempotent.
  Status Stop() { return Signal(SIGTERM, kEtcdStopTimeout); }
  // SIGSTOP / SIGCONT: etcd keeps its connections but answers nothing (a hung server).
  // SIGSTOP is delivered asynchronously: a thread running on another core may still answer a request
  // after kill returns. Pause returns once every thread of etcd is seen stopped (bounded).
  Status Pause() {
    if (pid_ <= 0 || kill(pid_, SIGSTOP) != 0) return FailedPrecondition("not running");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!AllThreadsStopped()) {
      if (std::chrono::steady_clock::now() > deadline) return Timeout("etcd did not stop within 5 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Status::Ok();
  }
  Status Resume() {
    return pid_ > 0 && kill(pid_, SIGCONT) == 0 ? Status::Ok() : FailedPrecondition("not running");
  }

  bool running() const { return pid_ > 0; }
  // Whether every thread of etcd is in state T (stopped), from /proc/<pid>/task/<tid>/stat.
  bool AllThreadsStopped() const {
    std::error_code ec;
    const std::filesystem::path tasks = "/proc/" + std::to_string(pid_) + "/task";
    for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
      std::ifstream in(task.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t close = stat.rfind(')');  // the state follows the command name: "pid (comm) S ..."
      if (close == std::string::npos || close + 2 >= stat.size()) continue;  // the thread ended
      const char state = stat[close + 2];
      if (state != 'T' && state != 't') return false;
    }
    return !ec;
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }
  uint16_t client_port() const { return client_port_; }
  std::string data_dir() const { return root_.empty() ? "" : root_ + "/data"; }
  // The end of etcd's log, for a failure message.
  std::string LogTail(size_t bytes = 4000) const {
    std::ifstream in(root_ + "/etcd.log", std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    std::string all = s.str();
    return all.size() > bytes ? all.substr(all.size() - bytes) : all;
  }

 private:
  Status Launch() {
    const std::string client_url = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer_port_);
    // A short heartbeat and election timeout: a single member elects itself sooner at start, and
    // the shortest lease etcd grants (1.5 election timeouts) is 1 s.
    std::vector<std::string> args = {binary_,
                                     "--name=default",
                                     "--data-dir=" + data_dir(),
                                     "--listen-client-urls=" + client_url,
                                     "--advertise-client-urls=" + client_url,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=default=" + peer_url,
                                     "--heartbeat-interval=50",
                                     "--election-timeout=500"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    char* envp[] = {nullptr};  // no ETCD_* variable of the caller's may change its configuration

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = root_ + "/etcd.log";
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, binary_.c_str(), &actions, nullptr, argv.data(), envp);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return ErrnoError("spawn " + binary_, rc);
    pid_ = pid;
    return WaitUntilServing();
  }

  // Bounded by kEtcdStartTimeout and a count of tries; fails early when etcd exits.
  Status WaitUntilServing() {
    EtcdClientOptions options;
    options.connect_timeout = std::chrono::milliseconds(1000);
    options.request_timeout = std::chrono::milliseconds(2000);
    WP_ASSIGN_OR_RETURN(auto client, EtcdClient::Create(endpoint(), options));
    const auto deadline = std::chrono::steady_clock::now() + kEtcdStartTimeout;
    Status last = Unavailable("not tried");
    for (int i = 0; i < 1000 && std::chrono::steady_clock::now() < deadline; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return Unavailable("etcd exited at start (status " + std::to_string(status) + "): " + LogTail());
      }
      auto probe = client->Get("/weightport-test/probe");
      if (probe.ok()) return Status::Ok();
      last = probe.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    Stop().IgnoreError();
    return Timeout("etcd did not serve within " + std::to_string(kEtcdStartTimeout.count()) +
                   " s: " + last.ToString() + "\n" + LogTail());
  }

  // Sends `sig` and reaps etcd; SIGKILL when it is still there after `grace`, and gives up 10 s
  // after that.
  Status Signal(int sig, std::chrono::seconds grace) {
    if (pid_ <= 0) return Status::Ok();
    kill(pid_, SIGCONT);  // a paused etcd cannot act on SIGTERM
    kill(pid_, sig);
    const auto escalate = std::chrono::steady_clock::now() + grace;
    const auto give_up = escalate + std::chrono::seconds(10);
    for (int i = 0; i < 100000 && std::chrono::steady_clock::now() < give_up; ++i) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno == ECHILD)) {
        pid_ = -1;
        return Status::Ok();
      }
      if (sig != SIGKILL && std::chrono::steady_clock::now() >= escalate) {
        kill(pid_, SIGKILL);
        sig = SIGKILL;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return Timeout("etcd (pid " + std::to_string(pid_) + ") did not exit");
  }

  std::string binary_;
  std::string root_;  // the log and data/ in it
  uint16_t client_port_ = 0;
  uint16_t peer_port_ = 0;
  pid_t pid_ = -1;
};

// A fixture whose every test has an etcd and a client of its own; skipped without etcd.
class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::Installed())
      GTEST_SKIP() << "no " << kEtcdBinary << " (Debian etcd-server: scripts/setup)";
    Status started = etcd_.Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    auto client = EtcdClient::Create(etcd_.endpoint());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client).value();
  }

  EtcdServer etcd_;
  std::unique_ptr<EtcdClient> client_;
};

}  // namespace weightport::store_test
