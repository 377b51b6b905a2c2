// A window of requests in flight that adapts to congestion (AIMD). It halves on a sign of
// congestion, at most once per window of completions (the requests in flight together saw the same
// queue, so one event is one cut), and grows by one after a window of completions without a sign,
// up to its maximum. The signs: a request lost or refused (the caller says so), and, with a delay
// factor, a request that took that many times the fastest one seen and more than a floor above it
// (queueing on a shared path). Delay is off by default: on a fast path a full window's own requests
// queue behind each other and would read as delay.
//
// Thread-safety: none; one owner (the loop thread of the transfer).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace weightport {

class CongestionWindow {
 public:
  struct Options {
    size_t max = 32;          // also the starting size; at least 1
    double delay_factor = 0;  // 0: delay is not watched
    std::chrono::nanoseconds delay_floor = std::chrono::milliseconds(2);
  };

  explicit CongestionWindow(Options options);

  size_t size() const { return window_; }
  size_t min_size() const { return min_window_; }
  uint64_t loss_cuts() const { return loss_cuts_; }    // cuts on a lost or refused request
  uint64_t delay_cuts() const { return delay_cuts_; }  // cuts on a slow one

  // A request completed `took` after it was issued: a cut when it was slow (delay watched), else a
  // step toward growth.
  void OnCompleted(std::chrono::nanoseconds took);
  // A request was lost or refused (it will be retried).
  void OnLost() { Cut(loss_cuts_); }

 private:
  void Cut(uint64_t& counter);

  Options options_;
  size_t window_;
  size_t min_window_;
  size_t since_cut_ = 0;  // completions since the window last changed
  bool cut_ = false;      // cut at least once
  std::chrono::nanoseconds fastest_ = std::chrono::nanoseconds::max();
  uint64_t loss_cuts_ = 0, delay_cuts_ = 0;
};

}  // namespace weightport
