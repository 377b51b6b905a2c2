// What paces a receiving transfer's requests: its fixed cap (RateCap over max_bytes_per_s) and,
// with background priority (BackgroundYield), the window that keeps its path just busy and, while
// it yields, a token bucket of its own at the share it keeps, begun afresh each time it yields.
// FetchExecutor and a plan rank's receive both pace their Gets with one.
//
// Thread-safety: none; one owner (the loop thread of the transfer).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "weightport/core/background_yield.h"
#include "weightport/core/rate_cap.h"

namespace weightport {

class FetchPacer {
 public:
  using Clock = std::chrono::steady_clock;

  // max_bytes_per_s <= 0: no fixed cap; background null: normal priority.
  FetchPacer(double max_bytes_per_s, Clock::time_point start, std::shared_ptr<BackgroundYield> background)
      : cap_(max_bytes_per_s, start), background_(std::move(background)) {}

  // Whether a request of `bytes` may go at `now`: nullopt when it may (counted in every bucket),
  // else how long to wait before asking again (nothing counted).
  std::optional<std::chrono::milliseconds> Admit(uint64_t bytes, Clock::time_point now);
  // The requests to keep in flight, at most `window` (the congestion window's size).
  size_t Window(size_t window) const { return background_ ? background_->window(window) : window; }
  // A request of `bytes` issued at `issued` completed at `now`; true when it made the transfer
  // begin to yield.
  bool OnCompleted(uint64_t bytes, Clock::time_point issued, Clock::time_point now);

 private:
  RateCap cap_;
  std::shared_ptr<BackgroundYield> background_;
  RateCap yield_cap_;  // while yielding: the share it keeps (none otherwise)
};

}  // namespace weightport
