#include "weightport/core/congestion_window.h"

#include <algorithm>

namespace weightport {

CongestionWindow::CongestionWindow(Options options)
    : options_(options), window_(std::max<size_t>(1, options.max)), min_window_(window_) {
  options_.max = window_;
}

void CongestionWindow::OnCompleted(std::chrono::nanoseconds took) {
  fastest_ = std::min(fastest_, took);
  if (options_.delay_factor > 0 && took > options_.delay_factor * fastest_ &&
      took - fastest_ > options_.delay_floor)
    return Cut(delay_cuts_);
  if (++since_cut_ >= window_ && window_ < options_.max) {
    ++window_;  // a window of completions without congestion: one more in flight
    since_cut_ = 0;
  }
}

void CongestionWindow::Cut(uint64_t& counter) {
  // One cut per window of completions: the requests in flight together saw the same queue.
  if (cut_ && since_cut_ < window_) {
    ++since_cut_;
    return;
  }
  cut_ = true;
  ++counter;
  window_ = std::max<size_t>(1, window_ / 2);
  since_cut_ = 0;
  min_window_ = std::min(min_window_, window_);
}

}  // namespace weightport
