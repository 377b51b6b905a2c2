#include "weightport/transport/progress_loop.h"

namespace weightport {

ProgressLoop::ProgressLoop(std::unique_ptr<Transport> transport)
    : transport_(std::move(transport)), thread_([this] { Run(); }) {}

ProgressLoop::~ProgressLoop() { Stop(); }

void ProgressLoop::Post(std::function<void(Transport&)> task) {
  {
    MutexLock lock(mu_);
    if (!stopping_.load(std::memory_order_relaxed)) {
      tasks_.push_back(std::move(task));
      transport_->Wake();
      return;
    }
  }
  // Stopping or stopped: once the loop thread is gone the task runs here (on the loop thread
  // itself, it is already safe). Tasks posted by several threads after Stop() run one at a time,
  // so the transport still sees one thread at a time; recursive, for tasks that Post or Call.
  if (on_loop_thread()) return task(*transport_);
  Join();
  std::lock_guard<std::recursive_mutex> lock(after_stop_mu_);
  task(*transport_);
}

void ProgressLoop::PostAfter(std::chrono::milliseconds delay, std::function<void(Transport&)> task) {
  {
    MutexLock lock(mu_);
    if (!stopping_.load(std::memory_order_relaxed)) {
      timers_.emplace(std::chrono::steady_clock::now() + delay, std::move(task));
      transport_->Wake();
      return;
    }
  }
  Post(std::move(task));  // stopping: runs now, against the closed transport
}

void ProgressLoop::Join() {
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

void ProgressLoop::Run() {
  loop_id_.store(std::this_thread::get_id(), std::memory_order_release);
  std::deque<std::function<void(Transport&)>> batch;
  for (;;) {
    auto wait = std::chrono::milliseconds(100);
    {
      MutexLock lock(mu_);
      batch.swap(tasks_);
      const auto now = std::chrono::steady_clock::now();
      while (!timers_.empty() && timers_.begin()->first <= now) {
        batch.push_back(std::move(timers_.begin()->second));
        timers_.erase(timers_.begin());
      }
      if (!timers_.empty())
        wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(timers_.begin()->first - now));
    }
    for (auto& task : batch) task(*transport_);
    const bool ran_tasks = !batch.empty();
    batch.clear();
    const size_t events = transport_->Progress();
    if (stopping_.load(std::memory_order_acquire)) {
      MutexLock lock(mu_);
      if (tasks_.empty()) break;
      continue;
    }
    if (!ran_tasks && events == 0) transport_->WaitForEvent(wait);
  }
  // Close on the loop thread; let the cancellations it produces run, then the pending timers.
  transport_->Close();
  while (transport_->Progress() > 0) {
  }
  std::multimap<std::chrono::steady_clock::time_point, std::function<void(Transport&)>> timers;
  {
    MutexLock lock(mu_);
    timers.swap(timers_);
  }
  for (auto& [when, task] : timers) task(*transport_);
  while (transport_->Progress() > 0) {
  }
}

void ProgressLoop::Stop() {
  {
    MutexLock lock(mu_);
    stopping_.store(true, std::memory_order_release);
  }
  transport_->Wake();
  if (!on_loop_thread()) Join();
}

}  // namespace weightport
