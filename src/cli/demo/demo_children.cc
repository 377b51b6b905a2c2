#include "demo_children.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace weightport::cli {

using std::chrono::milliseconds;

namespace {

// The children started and not reaped yet, for StopLiveChildren (a signal's watcher thread).
std::mutex live_mu;
std::set<pid_t> live_pids;

}  // namespace

// Starts `weightport subscribe ...` with stdout and stderr into `log`.
Result<pid_t> Spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("cannot create " + log, errno);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return ErrnoError("fork", errno);
  }
  if (pid == 0) {
    sigset_t none;  // the demo's blocked SIGINT and SIGTERM are not the child's
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(fd);
  std::lock_guard<std::mutex> lock(live_mu);
  live_pids.insert(pid);
  return pid;
}

void StopLiveChildren(milliseconds grace) {
  std::lock_guard<std::mutex> lock(live_mu);
  for (pid_t pid : live_pids) kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!live_pids.empty() && std::chrono::steady_clock::now() < deadline) {
    for (auto it = live_pids.begin(); it != live_pids.end();)
      it = waitpid(*it, nullptr, WNOHANG) != 0 ? live_pids.erase(it) : std::next(it);
    std::this_thread::sleep_for(milliseconds(20));
  }
  for (pid_t pid : live_pids) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  live_pids.clear();
}

// Waits for a child up to `timeout`, then kills it. Records its exit code and peak RSS.
void Reap(Child& c, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  rusage usage{};
  int status = 0;
  while (c.pid > 0) {
    const pid_t r = wait4(c.pid, &status, WNOHANG, &usage);
    if (r == c.pid) break;
    if (r < 0) return;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(c.pid, SIGKILL);
      wait4(c.pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  {
    std::lock_guard<std::mutex> lock(live_mu);
    live_pids.erase(c.pid);
  }
  c.pid = -1;
  c.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  c.peak_rss = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

std::string Tail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
}

// A subscriber's peak private memory, from the --json summary at the end of its log.
}  // namespace weightport::cli
