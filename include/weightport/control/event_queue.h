// A queue that reader threads fill and one thread drains with a deadline: the coordinators read
// each peer on a thread of its own, so a peer that stops sending cannot block the others, and every
// wait of the draining thread is bounded.
//
// With a capacity, Push waits while the queue is full: a reader then stops reading its socket and
// TCP holds its peer back, so what waits in memory stays bounded however fast peers send. Close
// releases waiting pushers (their events are dropped).
//
// Thread-safety: Push and Close from any thread; Next from one thread at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

namespace weightport {

template <typename T>
class EventQueue {
 public:
  explicit EventQueue(size_t capacity = 0) : capacity_(capacity) {}
  void Push(T event) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (capacity_ > 0) space_.wait(lock, [&] { return closed_ || events_.size() < capacity_; });
      if (closed_) return;
      events_.push_back(std::move(event));
    }
    cv_.notify_all();
  }
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    space_.notify_all();
  }
  // The oldest event, waiting until `deadline`; nullopt when none came by then.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
// GCC 12 takes the members of a std::variant moved out of the queue for uninitialised (a false
// positive at -O2, reported where Next is inlined).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
  std::optional<T> Next(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return !events_.empty(); })) return std::nullopt;
    T e = std::move(events_.front());
    events_.pop_front();
    lock.unlock();
    space_.notify_one();
    return e;
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_, space_;
  std::deque<T> events_;
  bool closed_ = false;
};

}  // namespace weightport
