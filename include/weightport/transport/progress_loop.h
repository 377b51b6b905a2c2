// ProgressLoop: the one thread that owns a Transport. It runs posted tasks and drives Progress(),
// sleeping in WaitForEvent when idle. Other threads reach the transport only through Post / Call.
//
// Thread-safety: Post, Call and Stop may be called from any thread. Call must not be called from
// the loop thread itself (it would deadlock); use Post there, or call the transport directly.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "weightport/core/thread_annotations.h"
#include "weightport/transport/transport.h"

namespace weightport {

class ProgressLoop {
 public:
  // Takes ownership of the transport; starts the loop thread.
  explicit ProgressLoop(std::unique_ptr<Transport> transport);
  ~ProgressLoop();  // Stop()
  ProgressLoop(const ProgressLoop&) = delete;
  ProgressLoop& operator=(const ProgressLoop&) = delete;

  // Runs `task` on the loop thread, soon. After Stop() the loop thread is gone and the task runs at
  // once on the caller's thread, against the closed transport (its operations fail fast).
  void Post(std::function<void(Transport&)> task);

  // Runs `task` on the loop thread once `delay` has passed (backoff, timeouts). Timers still pending
  // at Stop() run right after the transport is closed, so their operations fail fast and every
  // completion still fires exactly once.
  void PostAfter(std::chrono::milliseconds delay, std::function<void(Transport&)> task);

  // Runs `task` on the loop thread and returns its result; blocks the caller meanwhile.
  template <typename F>
  auto Call(F&& task) -> decltype(task(std::declval<Transport&>())) {
    using R = decltype(task(std::declval<Transport&>()));
    auto promise = std::make_shared<std::promise<R>>();
    auto future = promise->get_future();
    Post([promise, task = std::forward<F>(task)](Transport& t) mutable {
      if constexpr (std::is_void_v<R>) {
        task(t);
        promise->set_value();
      } else {
        promise->set_value(task(t));
      }
    });
    return future.get();
  }

  // Closes the transport on the loop thread, lets pending completions run, joins the thread.
  // Idempotent.
  void Stop();
  bool on_loop_thread() const {
    return std::this_thread::get_id() == loop_id_.load(std::memory_order_acquire);
  }

 private:
  void Run();
  void Join();  // joins the loop thread once, whichever thread asks first

  std::unique_ptr<Transport> transport_;
  Mutex mu_;
  std::deque<std::function<void(Transport&)>> tasks_ GUARDED_BY(mu_);
  std::multimap<std::chrono::steady_clock::time_point, std::function<void(Transport&)>> timers_
      GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
  // The loop thread's id, set when it starts. Not thread_.get_id(): that races with a join.
  std::atomic<std::thread::id> loop_id_{};
  std::mutex join_mu_;
  std::recursive_mutex after_stop_mu_;  // serializes tasks run by callers after Stop()
  std::thread thread_;
};

}  // namespace weightport
