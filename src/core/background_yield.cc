#include "weightport/core/background_yield.h"

#include <algorithm>
#include <cmath>

namespace weightport {

void BackgroundYield::OnCompleted(uint64_t bytes, Clock::time_point issued, Clock::time_point now) {
  if (bytes == 0) return;
  // Served from its issue, or from the previous completion when it was queued behind that one.
  const Clock::time_point start = std::max(issued, last_done_);
  last_done_ = std::max(last_done_, now);
  // Nothing of its own ahead of it: its time holds the round trip too, not only its bytes.
  const bool alone = start == issued;
  const double sample = std::chrono::duration<double>(now - start).count() / static_cast<double>(bytes);
  if (sample <= 0) return;
  if (yielding_) {
    // Each request goes alone now, so its own time is its service time: one served about as fast
    // as with the path to itself says the others have gone (at worst a lull in their traffic,
    // which is the path's to use too). One still queued behind another (in flight when yielding
    // began) is measured against the queued base.
    const double reference = alone ? std::max(base_, alone_base_) : base_;
    if (sample <= options_.resume * reference) {
      yielding_ = false;
      recent_count_ = 0;
    }
    return;
  }
  if (alone) {  // the round trip's share: for window() and for resuming, not a sign
    alone_base_ = alone_base_ == 0 ? sample : std::min(alone_base_, sample);
    return;
  }
  // The median of the last three: one slow request is not a sign, two in a row are.
  recent_[recent_count_++ % 3] = sample;
  if (recent_count_ < 3) return;
  const double median =
      std::max(std::min(recent_[0], recent_[1]), std::min(std::max(recent_[0], recent_[1]), recent_[2]));
  base_ = base_ == 0 ? median : std::min(base_, median);
  if (median > options_.slowdown * base_) {
    yielding_ = true;
    ++yields_;
  }
}

size_t BackgroundYield::window(size_t most) const {
  most = std::max<size_t>(most, 1);
  if (base_ == 0 || alone_base_ == 0) return std::min<size_t>(most, kFirstWindow);
  // A request alone takes alone_base_ per byte, queued ones base_: this many keep the path busy
  // (the next one's request reaches the peer while the one before it is still being served).
  const auto busy = static_cast<size_t>(std::ceil(alone_base_ / base_));
  return std::min(most, std::max<size_t>(busy, 2));  // not clamp: `most` may be 1
}

double BackgroundYield::rate() const { return yielding_ && base_ > 0 ? options_.share / base_ : 0.0; }

}  // namespace weightport
